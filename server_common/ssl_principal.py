"""The principal of a client that authenticated with its TLS certificate (mutual TLS).

Theory of operation
-------------------
On an SSL listener with ``ssl.client.auth=required`` (or ``requested``, when the client
sent a certificate) Kafka names the connection's principal after the certificate's
subject: ``User:`` and the subject's distinguished name, or what Kafka's
``ssl.principal.mapping.rules`` make of it. raftka reads the same setting, with Kafka's
syntax, a comma-separated list tried in order:

``DEFAULT``
    the distinguished name as it is (``CN=alice,OU=eng,O=acme``);
``RULE:<regex>/<replacement>/[L|U]``
    when the regex matches the *whole* name, every match is replaced with
    ``<replacement>`` (``$1`` is the first group, as in Java), then lower-cased (``L``)
    or upper-cased (``U``). A ``/`` or ``\\`` inside the regex or the replacement is
    written ``\\/`` or ``\\\\``; a comma needs no escape.

The first rule that applies decides. When none does, Kafka fails the authentication:
so does raftka (:class:`NoMatchingRuleError`), and the connection is closed. A rule list that
cannot be read, or a regex that does not compile, is a :class:`ConfigError` naming the
key, at start-up.

The distinguished name is the certificate subject's RFC 4514 string as the
``cryptography`` package writes it (most specific attribute first, no spaces after the
commas), which is what Java's ``X500Principal.getName()`` (RFC 2253) gives for the
usual attributes: CN, OU, O, L, ST, C, STREET, DC and UID.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from cryptography import x509

from raftka.server_common.process_config import ConfigError

__all__ = [
    "ANONYMOUS",
    "DEFAULT_MAPPER",
    "NoMatchingRuleError",
    "SslPrincipalMapper",
    "subject_name",
]

#: Kafka's principal for a connection that did not authenticate.
ANONYMOUS: Final = "User:ANONYMOUS"
_KEY: Final = "ssl.principal.mapping.rules"


class NoMatchingRuleError(Exception):
    """No rule of ``ssl.principal.mapping.rules`` applies to a certificate's subject."""


@dataclass(frozen=True, slots=True)
class _Rule:
    #: None: DEFAULT (the name as it is).
    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: str = ""  # "", "L" or "U"

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        # Java's replaceAll: every match replaced, $n naming a group.
        mapped = self.pattern.sub(lambda m: _expand(self.replacement, m), name)
        if self.case == "L":
            return mapped.lower()
        if self.case == "U":
            return mapped.upper()
        return mapped


@dataclass(frozen=True, slots=True)
class SslPrincipalMapper:
    """Parsed ``ssl.principal.mapping.rules``; :meth:`principal` maps a subject."""

    rules: tuple[_Rule, ...]

    @classmethod
    def from_rules(cls, text: str, key: str = _KEY) -> SslPrincipalMapper:
        """The rules of ``text`` (Kafka's syntax); ConfigError naming ``key``."""
        return cls(_parse(text, key))

    def principal(self, subject: str) -> str:
        """``User:<name>`` for a certificate subject; NoMatchingRuleError when no rule applies
        (or the one that does maps it to nothing)."""
        for rule in self.rules:
            name = rule.apply(subject)
            if name is None:
                continue
            if not name:
                raise NoMatchingRuleError(f"{subject!r} maps to an empty name")
            return f"User:{name}"
        raise NoMatchingRuleError(f"no {_KEY} rule applies to {subject!r}")


def subject_name(der_certificate: bytes) -> str:
    """The certificate's subject as a distinguished name (see the module doc)."""
    return x509.load_der_x509_certificate(der_certificate).subject.rfc4514_string()


def _parse(text: str, key: str) -> tuple[_Rule, ...]:
    rules: list[_Rule] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if text.startswith("DEFAULT", i):
            rules.append(_Rule(None))
            i += len("DEFAULT")
        elif text.startswith("RULE:", i):
            pattern, i = _until_slash(text, i + len("RULE:"), key)
            replacement, i = _until_slash(text, i, key)
            case = ""
            if i < n and text[i] in "LU":
                case, i = text[i], i + 1
            try:
                compiled = re.compile(pattern)
            except re.error as e:
                raise ConfigError(
                    f"{key}: RULE:{pattern}/ is not a regular expression: {e}"
                ) from None
            groups = [int(g) for g in re.findall(r"(?<!\\)\$(\d+)", replacement)]
            if groups and max(groups) > compiled.groups:
                raise ConfigError(
                    f"{key}: RULE:{pattern}/{replacement}/ names group ${max(groups)}, "
                    f"but the pattern has {compiled.groups}"
                )
            rules.append(_Rule(compiled, replacement, case))
        else:
            rest = text[i:].split(",", 1)[0].strip()
            raise ConfigError(
                f"{key}: {rest or '(empty)'!r} is neither DEFAULT nor RULE:pattern/replacement/[LU]"
            )
        while i < n and text[i].isspace():
            i += 1
        if i == n:
            return tuple(rules)
        if text[i] != ",":
            raise ConfigError(f"{key}: expected ',' between rules at {text[i:]!r}")
        i += 1


def _until_slash(text: str, i: int, key: str) -> tuple[str, int]:
    """The part of a RULE up to its next unescaped '/', and the index after that slash.
    ``\\/`` stands for '/'; any other escape is kept for the regex (or the replacement)."""
    out: list[str] = []
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append(nxt if nxt == "/" else ch + nxt)
            i += 2
            continue
        if ch == "/":
            return "".join(out), i + 1
        out.append(ch)
        i += 1
    raise ConfigError(f"{key}: a RULE needs the form RULE:pattern/replacement/[LU]")


def _expand(replacement: str, match: re.Match[str]) -> str:
    """Java's replacement syntax: ``$n`` is group n, ``\\x`` is x literally."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        ch = replacement[i]
        if ch == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif ch == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 1
            while j < len(replacement) and replacement[j].isdigit():
                j += 1
            out.append(match.group(int(replacement[i + 1 : j])) or "")
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


#: Kafka's default rules: the whole distinguished name.
DEFAULT_MAPPER: Final = SslPrincipalMapper.from_rules("DEFAULT")
