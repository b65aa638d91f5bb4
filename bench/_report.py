"""What the bench scripts share (they run as ``python bench/<name>.py``, so this folder
is on sys.path): how a list of result rows is printed."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def print_results(results: Sequence[Mapping[str, Any]]) -> None:
    """Each row as one JSON line (for tools), then a blank line and the same rows as
    ``key=value | ...`` (for people)."""
    for r in results:
        print(json.dumps(r))
    print()
    for r in results:
        print(" | ".join(f"{k}={v}" for k, v in r.items()))
