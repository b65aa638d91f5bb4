"""``raftka acls``: add, remove and list ACLs (like kafka-acls).

- ``raftka acls add --allow-principal User:alice --operation Read --topic orders`` is
  ``kafka-acls --add ...``: one binding per principal x host x operation x resource.
  ``--deny-principal`` makes DENY bindings; ``--allow-host``/``--deny-host`` name the
  hosts of the principals of that kind (default ``*``); ``--operation`` repeats
  (default ``All``); resources are ``--topic``, ``--group``, ``--transactional-id``
  (each repeatable) and ``--cluster``; ``--resource-pattern-type literal|prefixed``
  (default literal).
- ``raftka acls remove ...`` is ``kafka-acls --remove --force``: the same options make
  filters; without principals every ACL of the named resources goes (Kafka's rule),
  and ``--resource-pattern-type`` may also be ``any`` or ``match``. It prints what it
  removed; unlike kafka-acls it does not ask for confirmation.
- ``raftka acls list [resource options] [--principal User:alice]`` is
  ``kafka-acls --list``: every ACL when no resource is named.

Output is kafka-acls' (``Current ACLs for resource `ResourcePattern(resourceType=TOPIC,
name=orders, patternType=LITERAL)`:`` then one ``(principal=..., host=...,
operation=..., permissionType=...)`` line per binding), without its trailing spaces.
Bad input is one line naming the option, with Kafka's error name (INVALID_REQUEST);
the operations a resource type accepts are kafka-acls' (READ is no CLUSTER operation).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

import click

from raftka.client.admin import Admin
from raftka.client.cli._common import (
    api_timeout_option,
    bootstrap_option,
    command_admin,
    one_line_errors,
)
from raftka.common.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    binding_sort_key,
    parse_principal,
)
from raftka.common.errors import InvalidRequestError

__all__ = ["acls_command", "format_acls"]

_F = TypeVar("_F", bound=Callable[..., Any])

# kafka-acls' operations per resource type (AclCommand's ResourceToValidOperations).
_VALID_OPERATIONS: Final[dict[ResourceType, frozenset[AclOperation]]] = {
    ResourceType.TOPIC: frozenset(
        {
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.CREATE,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
            AclOperation.ALL,
        }
    ),
    ResourceType.GROUP: frozenset(
        {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALL}
    ),
    ResourceType.CLUSTER: frozenset(
        {
            AclOperation.CREATE,
            AclOperation.CLUSTER_ACTION,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
            AclOperation.IDEMPOTENT_WRITE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE,
            AclOperation.CREATE_TOKENS,
            AclOperation.DESCRIBE_TOKENS,
            AclOperation.ALL,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset(
        {AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.ALL}
    ),
}

_OPERATION_NAMES: Final = ", ".join(
    "".join(w.capitalize() for w in op.name.split("_"))
    for op in AclOperation
    if op not in (AclOperation.UNKNOWN, AclOperation.ANY)
)


def _bad(option: str, message: str) -> InvalidRequestError:
    return InvalidRequestError(f"{option}: {message}")


def _operation(text: str) -> AclOperation:
    """``Read``, ``ClusterAction``, ``cluster_action``, ``CLUSTER_ACTION`` -> the enum."""
    key = text.replace("_", "").replace("-", "").upper()
    for op in AclOperation:
        if op not in (AclOperation.UNKNOWN, AclOperation.ANY) and op.name.replace("_", "") == key:
            return op
    raise _bad("--operation", f"unknown operation {text!r}; one of {_OPERATION_NAMES}")


def _pattern_type(text: str, allowed: Sequence[PatternType]) -> PatternType:
    for p in allowed:
        if p.name == text.upper():
            return p
    names = "|".join(p.name.lower() for p in allowed)
    raise _bad("--resource-pattern-type", f"{text!r} is not one of {names}")


def _principals(option: str, values: Iterable[str]) -> list[str]:
    for value in values:
        try:
            parse_principal(value)
        except InvalidRequestError as e:
            raise _bad(option, e.message) from None
    return list(values)


def _resources(opts: dict[str, Any], pattern_type: PatternType) -> list[tuple[ResourceType, str]]:
    """The named resources as (type, name); the cluster's pattern is always literal."""
    out: list[tuple[ResourceType, str]] = []
    for option, kind, names in (
        ("--topic", ResourceType.TOPIC, opts["topics"]),
        ("--group", ResourceType.GROUP, opts["groups"]),
        ("--transactional-id", ResourceType.TRANSACTIONAL_ID, opts["transactional_ids"]),
    ):
        for name in names:
            if not name:
                raise _bad(option, "the name must not be empty")
            out.append((kind, name))
    if opts["cluster"]:
        if pattern_type is PatternType.PREFIXED:
            raise _bad("--resource-pattern-type", "the cluster resource is literal only")
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _check_operations(
    resources: Iterable[tuple[ResourceType, str]], operations: Iterable[AclOperation]
) -> None:
    for kind, _ in resources:
        for op in operations:
            if op not in _VALID_OPERATIONS[kind]:
                raise _bad(
                    "--operation",
                    f"{kind.name} does not support operation {op.name} (supported: "
                    f"{', '.join(sorted(o.name for o in _VALID_OPERATIONS[kind]))})",
                )


Entry = tuple[str, str, AclOperation, AclPermissionType]


def _entries(opts: dict[str, Any], operations: Sequence[AclOperation]) -> list[Entry]:
    """(principal, host, operation, permission) per principal x host x operation, the
    ALLOW principals then the DENY ones."""
    out: list[Entry] = []
    for kind, permission in (("allow", AclPermissionType.ALLOW), ("deny", AclPermissionType.DENY)):
        principals = _principals(f"--{kind}-principal", opts[f"{kind}_principals"])
        hosts = opts[f"{kind}_hosts"]
        if hosts and not principals:
            raise _bad(f"--{kind}-host", f"needs --{kind}-principal")
        if any(not h for h in hosts):
            raise _bad(f"--{kind}-host", "the host must not be empty (use '*')")
        for principal, host, op in itertools.product(
            principals, hosts or (WILDCARD_HOST,), operations
        ):
            out.append((principal, host, op, permission))
    return out


def _pattern_str(pattern: ResourcePattern) -> str:
    return (
        f"ResourcePattern(resourceType={pattern.resource_type.name}, name={pattern.name}, "
        f"patternType={pattern.pattern_type.name})"
    )


def _entry_str(entry: AccessControlEntry) -> str:
    return (
        f"\t(principal={entry.principal}, host={entry.host}, operation={entry.operation.name}, "
        f"permissionType={entry.permission_type.name})"
    )


def format_acls(heading: str, bindings: Iterable[AclBinding]) -> list[str]:
    """kafka-acls' listing: per resource pattern (in first-seen order) a heading line,
    its entries, and a blank line."""
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    lines: list[str] = []
    for pattern, entries in by_pattern.items():
        lines.append(f"{heading} for resource `{_pattern_str(pattern)}`:")
        lines.extend(_entry_str(e) for e in entries)
        lines.append("")
    return lines


def _echo(lines: Iterable[str]) -> None:
    for line in lines:
        click.echo(line)


# ---------------------------------------------------------------------------------------
# Options shared by the subcommands


def _resource_options(f: _F) -> _F:
    for decorator in reversed(
        (
            click.option("--topic", "topics", multiple=True, help="A topic (repeatable)."),
            click.option("--group", "groups", multiple=True, help="A group (repeatable)."),
            click.option(
                "--transactional-id",
                "transactional_ids",
                multiple=True,
                help="A transactional id (repeatable).",
            ),
            click.option("--cluster", is_flag=True, help="The cluster resource."),
        )
    ):
        f = decorator(f)
    return f


def _entry_options(f: _F) -> _F:
    for decorator in reversed(
        (
            click.option(
                "--allow-principal",
                "allow_principals",
                multiple=True,
                help="Principal (Type:name) to ALLOW (repeatable).",
            ),
            click.option(
                "--deny-principal",
                "deny_principals",
                multiple=True,
                help="Principal (Type:name) to DENY (repeatable).",
            ),
            click.option(
                "--allow-host",
                "allow_hosts",
                multiple=True,
                help="Host of the allowed principals (repeatable; default *).",
            ),
            click.option(
                "--deny-host",
                "deny_hosts",
                multiple=True,
                help="Host of the denied principals (repeatable; default *).",
            ),
            click.option(
                "--operation",
                "operations",
                multiple=True,
                metavar="OPERATION",
                help=f"Operation (repeatable): {_OPERATION_NAMES}.",
            ),
        )
    ):
        f = decorator(f)
    return f


def _pattern_option(*allowed: PatternType) -> Callable[[_F], _F]:
    names = "|".join(p.name.lower() for p in allowed)
    return click.option(
        "--resource-pattern-type",
        "pattern_type",
        default=None,
        metavar=names,
        help=f"How resource names match: {names} (default literal).",
    )


def _named_resources(
    opts: dict[str, Any], allowed: Sequence[PatternType], *, required: bool
) -> tuple[PatternType, list[tuple[ResourceType, str]]]:
    pattern_type = _pattern_type(opts["pattern_type"] or "literal", allowed)
    resources = _resources(opts, pattern_type)
    if required and not resources:
        raise _bad("--topic", "name a resource: --topic, --group, --transactional-id or --cluster")
    return pattern_type, resources


def _operations(
    opts: dict[str, Any], resources: Sequence[tuple[ResourceType, str]]
) -> list[AclOperation]:
    operations = list(dict.fromkeys(_operation(o) for o in opts["operations"]))
    _check_operations(resources, operations)
    return operations


@click.group("acls")
def acls_command() -> None:
    """Add, remove and list ACLs (like kafka-acls)."""


@acls_command.command("add")
@_entry_options
@_resource_options
@_pattern_option(PatternType.LITERAL, PatternType.PREFIXED)
@bootstrap_option
@api_timeout_option
def add_command(*, bootstrap_server: str, api_timeout_ms: int, **opts: Any) -> None:
    """Add ACLs: each principal x host x operation on each resource."""
    with one_line_errors():
        pattern_type, resources = _named_resources(
            opts, (PatternType.LITERAL, PatternType.PREFIXED), required=True
        )
        operations = _operations(opts, resources) or [AclOperation.ALL]
        entries = [AccessControlEntry(*e) for e in _entries(opts, operations)]
        if not entries:
            raise _bad(
                "--allow-principal", "name a principal: --allow-principal or --deny-principal"
            )
        patterns = [ResourcePattern(kind, name, pattern_type) for kind, name in resources]
        bindings = [AclBinding(p, e) for p in patterns for e in entries]
        with command_admin(Admin, bootstrap_server, api_timeout_ms) as admin:
            admin.create_acls(bindings)
            _echo(format_acls("Adding ACLs", bindings))
            for pattern in patterns:
                _echo(format_acls("Current ACLs", admin.describe_acls(_exactly(pattern))))


def _exactly(pattern: ResourcePattern) -> AclBindingFilter:
    return AclBindingFilter(pattern.resource_type, pattern.name, pattern.pattern_type)


_FILTER_PATTERNS: Final = (
    PatternType.LITERAL,
    PatternType.PREFIXED,
    PatternType.ANY,
    PatternType.MATCH,
)


@acls_command.command("remove")
@_entry_options
@_resource_options
@_pattern_option(*_FILTER_PATTERNS)
@bootstrap_option
@api_timeout_option
def remove_command(*, bootstrap_server: str, api_timeout_ms: int, **opts: Any) -> None:
    """Remove the ACLs of the named resources: those of the named principals, hosts and
    operations, or every one when no principal is named."""
    with one_line_errors():
        pattern_type, resources = _named_resources(opts, _FILTER_PATTERNS, required=True)
        operations = _operations(opts, resources) or [AclOperation.ANY]
        entries: list[tuple[str | None, str | None, AclOperation, AclPermissionType]]
        if opts["allow_principals"] or opts["deny_principals"]:
            entries = list(_entries(opts, operations))
        else:
            for kind in ("allow", "deny"):
                if opts[f"{kind}_hosts"]:
                    raise _bad(f"--{kind}-host", f"needs --{kind}-principal")
            entries = [(None, None, op, AclPermissionType.ANY) for op in operations]
        filters = [
            AclBindingFilter(kind, name, pattern_type, *entry)
            for kind, name in resources
            for entry in entries
        ]
        with command_admin(Admin, bootstrap_server, api_timeout_ms) as admin:
            deleted = admin.delete_acls(filters)
            removed = dict.fromkeys(b for bindings in deleted.values() for b in bindings)
            _echo(format_acls("Removed ACLs", removed))
            if not removed:
                click.echo("No ACLs matched.")


@acls_command.command("list")
@_resource_options
@_pattern_option(*_FILTER_PATTERNS)
@click.option(
    "--principal",
    "principals",
    multiple=True,
    help="Only this principal's ACLs (Type:name, repeatable).",
)
@bootstrap_option
@api_timeout_option
def list_command(*, bootstrap_server: str, api_timeout_ms: int, **opts: Any) -> None:
    """List ACLs: of the named resources, else every ACL."""
    with one_line_errors():
        pattern_type, resources = _named_resources(opts, _FILTER_PATTERNS, required=False)
        principals: list[str | None] = [*_principals("--principal", opts["principals"])] or [None]
        if resources:
            filters = [
                AclBindingFilter(kind, name, pattern_type, principal)
                for kind, name in resources
                for principal in principals
            ]
        else:
            # No resource: every one, of the pattern type asked for if one was.
            any_pattern = PatternType.ANY if opts["pattern_type"] is None else pattern_type
            if any_pattern is PatternType.MATCH:
                raise _bad("--resource-pattern-type", "match needs a resource to match")
            filters = [
                AclBindingFilter(pattern_type=any_pattern, principal=principal)
                for principal in principals
            ]
        with command_admin(Admin, bootstrap_server, api_timeout_ms) as admin:
            found = dict.fromkeys(b for f in filters for b in admin.describe_acls(f))
        _echo(format_acls("Current ACLs", sorted(found, key=binding_sort_key)))
