"""Kafka's ``.properties`` file syntax, shared by the processes' config files
(server_common/process_config.py) and the tools' ``--command-config`` (common/client_tls.py).

It lives here, below both, so the syntax is parsed one way: the client layer may not
import server_common.
"""

from __future__ import annotations

__all__ = ["PropertiesError", "parse_properties"]


class PropertiesError(ValueError):
    """A line that is not a property; the message names the source and the line."""


def parse_properties(text: str, *, source: str = "<properties>") -> dict[str, str]:
    """Kafka's .properties syntax: ``key=value`` / ``key: value`` / ``key value``.

    Comments start with ``#`` or ``!``; a line ending in an odd number of backslashes
    continues on the next. Escapes other than line continuation are not interpreted
    (Kafka configs do not need them). A key given twice is an error (Java keeps the
    last one silently, which hides a mistake).
    """
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i + 1
        line = lines[i].strip()
        i += 1
        while line.endswith("\\") and (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1] + (lines[i].strip() if i < len(lines) else "")
            i += 1
        if not line or line[0] in "#!":
            continue
        cut = len(line)
        for sep in ("=", ":", " ", "\t"):
            at = line.find(sep)
            if at != -1 and at < cut:
                cut = at
        key = line[:cut].strip()
        value = line[cut + 1 :].strip() if cut < len(line) else ""
        if value[:1] in ("=", ":") and line[cut] in " \t":
            value = value[1:].strip()
        if not key:
            raise PropertiesError(f"{source}:{start}: a line with no key: {lines[start - 1]!r}")
        if key in out:
            raise PropertiesError(f"{source}:{start}: {key} is set twice")
        out[key] = value
    return out
