"""The layers import one way only (DESIGN.md): common <- server_common <- storage <- raft
<- metadata <- broker, and client <- common; no server layer imports raftka.client.

How: every ``import`` and ``from ... import`` statement of every module under a layer's
folder (module level and inside functions alike, read with ``ast``, not by importing)
is checked against the layers that folder may use. A failure lists each offending
file, line and import.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: The server layers, lowest first: each may import itself and those before it.
SERVER_LAYERS = ("common", "server_common", "storage", "raft", "metadata", "broker")
#: What each layer may import, by its raftka.<layer> name.
ALLOWED: dict[str, frozenset[str]] = {
    layer: frozenset(SERVER_LAYERS[: i + 1]) for i, layer in enumerate(SERVER_LAYERS)
}
ALLOWED["client"] = frozenset({"common", "client"})


def _raftka_imports(path: Path) -> list[tuple[int, str]]:
    """(line, layer) of every ``raftka.<layer>`` import in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "raftka":
                names = [f"raftka.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "raftka" and len(parts) > 1:
                out.append((node.lineno, parts[1]))
    return out


def test_layers_import_downwards_only() -> None:
    """Each file of each layer imports only the layers ALLOWED names for it."""
    problems: list[str] = []
    for layer, allowed in ALLOWED.items():
        for path in sorted((REPO / layer).rglob("*.py")):
            for line, target in _raftka_imports(path):
                known = target in ALLOWED
                if known and target not in allowed:
                    problems.append(f"{path.relative_to(REPO)}:{line} imports raftka.{target}")
    assert not problems, "imports against the layering:\n" + "\n".join(problems)


def test_the_check_sees_function_level_imports(tmp_path: Path) -> None:
    """The scanner finds a lazy import inside a function, and ``from raftka import x``."""
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from raftka.client import Producer\n\nfrom raftka import broker\n"
    )
    assert sorted(_raftka_imports(module)) == [(2, "client"), (4, "broker")]
