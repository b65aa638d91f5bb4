"""Kafka's ``sasl.jaas.config`` for a SCRAM or PLAIN login, read into user and password.

Kafka's clients take their SASL credentials as one JAAS line (shown on two here)::

    org.apache.kafka.common.security.scram.ScramLoginModule required \
        username="alice" password="secret";

Spark's Kafka options (``kafka.sasl.jaas.config``) use the same line, so raftka reads
it where those settings come in. Only what a SCRAM or PLAIN login needs is read: the
login module (Kafka's ``ScramLoginModule`` for SCRAM-SHA-256/512, ``PlainLoginModule``
for PLAIN), the ``required`` flag and the quoted ``username`` and ``password``
options (a backslash escapes the next character inside quotes, as in JAAS). Anything
else (another module or flag, an unquoted value, an option raftka would not use) is an
error naming what is wrong, never skipped.
"""

from __future__ import annotations

import re
from typing import Final

from raftka.common.errors import InvalidConfigError

__all__ = ["parse_login"]

_MODULES: Final = {
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
}
_HEAD: Final = re.compile(r"\s*(?P<module>[\w.$]+)\s+(?P<flag>\w+)(?P<rest>.*)\Z", re.DOTALL)
_OPTION: Final = re.compile(r'\s*(?P<key>\w+)\s*=\s*"(?P<value>(?:[^"\\]|\\.)*)"', re.DOTALL)


def parse_login(text: str, mechanism: str, *, key: str = "sasl.jaas.config") -> tuple[str, str]:
    """(username, password) of a JAAS line for ``mechanism``; InvalidConfigError naming
    ``key`` when the line is not one raftka can use as written."""
    head = _HEAD.match(text)
    if head is None:
        raise InvalidConfigError(f"{key}: expected '<LoginModule> required username=\"...\" ...;'")
    module, flag, rest = head["module"], head["flag"], head["rest"]
    if mechanism not in _MODULES.get(module, ()):
        expected = next((m for m, mechs in _MODULES.items() if mechanism in mechs), None)
        if expected is None:
            raise InvalidConfigError(f"{key}: no login module for {mechanism}")
        raise InvalidConfigError(f"{key}: {mechanism} logs in with {expected}, not {module}")
    if flag != "required":
        raise InvalidConfigError(f"{key}: the login module's flag must be 'required', not {flag!r}")
    options: dict[str, str] = {}
    position = 0
    while True:
        found = _OPTION.match(rest, position)
        if found is None:
            break
        options[found["key"]] = re.sub(r"\\(.)", r"\1", found["value"], flags=re.DOTALL)
        position = found.end()
    if rest[position:].strip() != ";":
        raise InvalidConfigError(
            f'{key}: cannot read {rest[position:].strip()[:40]!r} (options are name="value", '
            "and the line ends with ';')"
        )
    unknown = sorted(set(options) - {"username", "password"})
    if unknown:
        raise InvalidConfigError(f"{key}: option {unknown[0]!r} is not used by raftka's login")
    if not options.get("username") or not options.get("password"):
        raise InvalidConfigError(f"{key}: username and password are required")
    return options["username"], options["password"]
