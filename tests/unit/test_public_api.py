"""The public surfaces are curated: each package's ``__all__`` is pinned in
``public_api.json`` (one reviewed list per package, in ``__all__``'s order), so adding,
removing or reordering a name is a deliberate change to that file; every name resolves.

Pinned: the top-level ``raftka`` exports (lazy kafka-python / aiokafka names),
``raftka.client``, ``raftka.client.compat``, ``raftka.common.record`` (the codec) and
``raftka.raft.quorum`` (the Raft core and its engine)."""

from __future__ import annotations

import importlib
from pathlib import Path

import orjson
import pytest

PINNED: dict[str, list[str]] = orjson.loads(
    Path(__file__).with_name("public_api.json").read_bytes()
)


@pytest.mark.parametrize("package", sorted(PINNED))
def test_all_is_pinned_and_resolves(package: str) -> None:
    module = importlib.import_module(package)
    assert list(module.__all__) == PINNED[package]
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"


def test_the_pinned_lists_are_sorted_as_ruff_sorts_all() -> None:
    """Upper-case constants first, then the rest, each alphabetically (ruff's RUF022),
    so a list edited by hand stays in the order ruff keeps ``__all__`` in."""
    for package, names in PINNED.items():
        assert names == sorted(names, key=lambda n: (not n.isupper(), n)), package
