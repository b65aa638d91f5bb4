"""The distribution installs every layer under ``raftka.*`` and squats no bare name."""

from __future__ import annotations

import importlib
import importlib.metadata
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAYERS = (
    "common",
    "server_common",
    "storage",
    "raft",
    "metadata",
    "broker",
    "client",
    "local",
    "chaos",
    "console",
)


def _declared_packages() -> set[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return set(config["tool"]["setuptools"]["packages"])


def test_every_source_package_is_declared() -> None:
    """Each folder with an __init__.py under a layer maps to a declared raftka.* package;
    a sub-package missing from pyproject.toml would silently not be installed."""
    found = {"raftka"}
    for init in (REPO / "src" / "raftka").rglob("__init__.py"):
        rel = init.parent.relative_to(REPO / "src")
        found.add(".".join(rel.parts))
    for layer in LAYERS:
        for init in (REPO / layer).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO)
            found.add("raftka." + ".".join(rel.parts))
    assert found == _declared_packages()


def test_layers_import_under_raftka_only() -> None:
    """Each top-level folder imports as raftka.<folder> (raftka.common, ... raftka.chaos), and
    the distribution declares one top-level package (plus pyspark_raftka, the module by
    which PySpark finds the "raftka" data source)."""
    for layer in LAYERS:
        module = importlib.import_module(f"raftka.{layer}")
        assert Path(module.__file__ or "").parent.name == layer
    dist = importlib.metadata.distribution("raftka")
    top_level = (dist.read_text("top_level.txt") or "raftka").split()
    assert sorted(top_level) in (["raftka"], ["pyspark_raftka", "raftka"])
    entry_points = {(ep.group, ep.name): ep.value for ep in dist.entry_points}
    assert entry_points == {
        ("console_scripts", "raftka"): "raftka.__main__:main",
        # The users' pytest fixtures (docs/client.md), auto-loaded by pytest.
        ("pytest11", "raftka"): "raftka.testing",
    }


def test_ships_py_typed() -> None:
    """Type checkers see raftka's annotations (PEP 561 marker in the installed package)."""
    import raftka
    import raftka.client

    for package in (raftka, raftka.client):
        assert (Path(package.__file__ or "").parent / "py.typed").is_file()
