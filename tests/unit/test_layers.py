"""The layers depend one way: common <- server_common <- storage <- raft <- metadata <-
broker, and client <- common only.

How: every module of the installed package is parsed (ast) and each import of a
``raftka.*`` module, including imports inside functions and under TYPE_CHECKING, is
checked against the layers its own layer may use. The checker is run once on the real
package and once on a planted tree, to show that it fails, naming the offending import.
A subprocess then checks through ``sys.modules`` that loading the broker's server does
not load the client library at all.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

# What each layer may import (itself included). The tools above the layers (the
# `raftka` command in the package root, `raftka up` in local/, the fault suite in
# chaos/, the web console in console/) may import anything and are not listed.
ALLOWED: Mapping[str, frozenset[str]] = {
    "common": frozenset({"common"}),
    "server_common": frozenset({"common", "server_common"}),
    "storage": frozenset({"common", "server_common", "storage"}),
    "raft": frozenset({"common", "server_common", "storage", "raft"}),
    "metadata": frozenset({"common", "server_common", "storage", "raft", "metadata"}),
    "broker": frozenset({"common", "server_common", "storage", "raft", "metadata", "broker"}),
    "client": frozenset({"common", "client"}),
}


def _imported_modules(tree: ast.AST, package: str) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in a module of ``package``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                yield node.lineno, ".".join([*base, *([node.module] if node.module else [])])
            elif node.module is not None:
                yield node.lineno, node.module


def layer_violations(roots: Mapping[str, Path]) -> list[str]:
    """Every upward or sideways import under ``roots`` (layer name -> its folder), as
    ``file:line: layer imports raftka.x``."""
    found: list[str] = []
    for layer, root in roots.items():
        allowed = ALLOWED[layer]
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            package = ".".join(["raftka", layer, *rel.parts[:-1]])
            tree = ast.parse(path.read_text(), filename=str(path))
            for line, module in _imported_modules(tree, package):
                parts = module.split(".")
                if parts[0] != "raftka":
                    continue
                target = parts[1] if len(parts) > 1 else ""
                if target not in allowed:
                    found.append(f"{path}:{line}: {layer} imports {module}")
    return found


def _installed_roots() -> dict[str, Path]:
    roots = {}
    for layer in ALLOWED:
        module = importlib.import_module(f"raftka.{layer}")
        roots[layer] = Path(module.__file__ or "").parent
    return roots


def test_no_layer_imports_upward() -> None:
    """The installed package holds the dependency direction."""
    violations = layer_violations(_installed_roots())
    assert violations == [], "upward imports:\n" + "\n".join(violations)


def test_the_checker_fails_on_a_planted_upward_import(tmp_path: Path) -> None:
    """A storage module importing the broker, and a broker module importing the client
    (inside a function, as a lazy import would), are both named."""
    storage = tmp_path / "storage"
    broker = tmp_path / "broker"
    storage.mkdir()
    broker.mkdir()
    (storage / "log.py").write_text("from raftka.common.errors import KafkaError\n")
    (storage / "bad.py").write_text("import os\nfrom raftka.broker.server import BrokerServer\n")
    (broker / "ok.py").write_text("from raftka.metadata.image import MetadataImage\n")
    (broker / "lazy.py").write_text("def f():\n    import raftka.client.admin\n")
    violations = layer_violations({"storage": storage, "broker": broker})
    assert sorted(violations) == [
        f"{broker / 'lazy.py'}:2: broker imports raftka.client.admin",
        f"{storage / 'bad.py'}:2: storage imports raftka.broker.server",
    ]


def test_relative_imports_are_resolved(tmp_path: Path) -> None:
    """``from ..broker import x`` inside raftka.metadata.sub counts as raftka.broker."""
    sub = tmp_path / "metadata" / "sub"
    sub.mkdir(parents=True)
    (sub / "m.py").write_text("from ...broker import server\nfrom . import sibling\n")
    violations = layer_violations({"metadata": tmp_path / "metadata"})
    assert violations == [f"{sub / 'm.py'}:1: metadata imports raftka.broker"]


def test_the_broker_server_loads_no_client_code() -> None:
    """Importing the broker's server (and the controller's) loads no raftka.client
    module: servers do not stand on the client library."""
    probe = (
        "import sys, raftka.broker.server, raftka.metadata.controller;"
        "print(sorted(m for m in sys.modules if m.startswith('raftka.client')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout
