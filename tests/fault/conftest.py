"""Fault tests: items marked ``root`` skip, with the reason, where we are not root."""

from __future__ import annotations

import os

import pytest

ROOT_REASON = "needs root (network namespaces)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason=ROOT_REASON)
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)
