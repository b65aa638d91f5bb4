"""The code blocks of README.md and docs/*.md, for the tests that keep them true.

``tests/integration/test_docs_examples.py`` runs them against ``raftka up`` and
``tests/unit/test_docs_blocks.py`` checks this extractor and parses the config
snippets. Test modules cannot import each other (``--import-mode=importlib``), so the
extractor lives here: the ``docs_blocks`` fixture hands it to tests, and
``pytest_generate_tests`` gives a test that asks for ``doc_case`` one case per
runnable block, in reading order (README.md, then docs/*.md by name).

The convention, as the docs follow it:

- Every code block is fenced and carries a language tag. Runnable tags: ``sh`` and
  ``bash`` (each command is run by bash, a line ending in ``\\`` continues on the next;
  each must exit 0), ``console`` (``$ command`` lines, each followed by the output it
  prints, stdout and stderr together, which is compared; the exit status is not) and
  ``python`` (the block is one program, run in a subprocess; it must exit 0).
  Not runnable: ``text``, ``json``, ``ini``, ``properties`` and ``toml`` (the last two
  are parsed with the reader raftka's processes use, when they are raftka's configs).
- An HTML comment on the line(s) right before the opening fence says what the test
  should know, always with a reason in parentheses:
  ``<!-- docs-test: skip (why) -->``: the block is not run (it starts a server that
  stays in the foreground, needs Spark, root, network namespaces, three hosts, or
  minutes of benchmark load);
  ``<!-- docs-test: skip-line PREFIX (why) -->``: the commands starting with PREFIX are
  not run, the block's others are (each such command is reported as a skipped case);
  ``<!-- docs-test: fresh (why) -->``: every non-internal topic is deleted before the
  block runs (it is written for a cluster without the earlier examples' topics).
  Anything else after ``docs-test:`` is an error, and so is a skip-line prefix that
  matches no command: nothing is skipped silently.
- Expected output (``console`` only) may contain ``...``, which matches any text within
  a line; lines are compared without trailing blanks. No other normalisation is needed:
  the examples use ``raftka up``'s default ports, as the test cluster does.
"""

from __future__ import annotations

import re
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN_LANGS = frozenset({"sh", "bash", "console", "python"})
CONFIG_LANGS = frozenset({"properties", "toml"})
TEXT_LANGS = frozenset({"text", "json", "ini"})
LANGS = RUN_LANGS | CONFIG_LANGS | TEXT_LANGS

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<lang>[^\s`]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<body>.*?)\s*-->\s*$")
_MARKER_BODY = re.compile(
    r"^(?P<kind>skip-line|skip|fresh)(?:\s+(?P<prefix>[^(]*?))?\s*\((?P<reason>.+)\)$"
)


class DocsError(ValueError):
    """A block or marker the convention does not allow; the message names file and line."""


@dataclass(frozen=True, slots=True)
class Command:
    line: int  # where it starts in the file (1-based)
    text: str  # continuation lines joined as bash would read them
    expected: tuple[str, ...] | None = None  # console: the output shown after it


@dataclass(frozen=True, slots=True)
class DocBlock:
    path: str  # relative to the repository, e.g. "docs/client.md"
    line: int  # the opening fence's line (1-based)
    lang: str
    text: str
    skip: str | None = None  # the reason, when the whole block is not run
    skip_lines: tuple[tuple[str, str], ...] = ()  # (prefix, reason)
    fresh: str | None = None  # the reason, when the block wants no earlier topics

    @property
    def name(self) -> str:
        return f"{self.path}:{self.line}:{self.lang}"

    def commands(self) -> list[Command]:
        """The commands of a sh/bash/console block, in order (comments and blank lines
        dropped); console commands carry the output shown after them."""
        return _commands(self)

    def skipped(self, command: Command) -> str | None:
        """The reason a command is not run, or None."""
        for prefix, reason in self.skip_lines:
            if command.text.startswith(prefix):
                return reason
        return None


def _marker(text: str, where: str) -> tuple[str, str, str] | None:
    m = _MARKER.match(text)
    if m is None:
        return None
    body = _MARKER_BODY.match(m["body"])
    if body is None:
        raise DocsError(f"{where}: bad docs-test marker {text.strip()!r}")
    prefix = (body["prefix"] or "").strip().strip('"')
    if (body["kind"] == "skip-line") != bool(prefix):
        raise DocsError(f"{where}: skip-line takes a command prefix, skip and fresh none")
    return body["kind"], prefix, body["reason"].strip()


def extract_blocks(text: str, path: str) -> list[DocBlock]:
    """Every fenced code block of one Markdown text, with its markers. DocsError for a
    block without a language tag or with one the convention does not know, a marker not
    right before a fence, or an unclosed fence."""
    lines = text.splitlines()
    blocks: list[DocBlock] = []
    pending: list[tuple[int, tuple[str, str, str]]] = []
    i = 0
    while i < len(lines):
        where = f"{path}:{i + 1}"
        marker = _marker(lines[i], where)
        if marker is not None:
            pending.append((i + 1, marker))
            i += 1
            continue
        m = _FENCE.match(lines[i])
        if m is None:
            if pending:
                raise DocsError(
                    f"{path}:{pending[0][0]}: a docs-test marker not right before a fence"
                )
            i += 1
            continue
        fence, lang, start = m["fence"], m["lang"], i
        if not lang:
            raise DocsError(f"{where}: a code block without a language tag")
        if lang not in LANGS:
            raise DocsError(f"{where}: unknown language tag {lang!r} (known: {sorted(LANGS)})")
        body: list[str] = []
        i += 1
        while i < len(lines) and not (
            lines[i].strip().startswith(fence[0] * len(fence))
            and not lines[i].strip().strip(fence[0])
        ):
            body.append(
                lines[i][len(m["indent"]) :] if lines[i].startswith(m["indent"]) else lines[i]
            )
            i += 1
        if i == len(lines):
            raise DocsError(f"{where}: the code block is never closed")
        kinds = [k for _, (k, _, _) in pending]
        skips = [r for _, (k, _, r) in pending if k == "skip"]
        fresh = [r for _, (k, _, r) in pending if k == "fresh"]
        if len(skips) > 1 or len(fresh) > 1 or ("skip" in kinds and len(kinds) > 1):
            raise DocsError(f"{where}: conflicting docs-test markers")
        if pending and lang not in RUN_LANGS and kinds != ["skip"]:
            raise DocsError(f"{where}: only skip applies to a {lang} block")
        block = DocBlock(
            path=path,
            line=start + 1,
            lang=lang,
            text="\n".join(body) + "\n",
            skip=skips[0] if skips else None,
            skip_lines=tuple((p, r) for _, (k, p, r) in pending if k == "skip-line"),
            fresh=fresh[0] if fresh else None,
        )
        for prefix, _ in block.skip_lines:
            if block.lang == "python" or not any(
                c.text.startswith(prefix) for c in block.commands()
            ):
                raise DocsError(f"{where}: skip-line {prefix!r} matches no command of the block")
        blocks.append(block)
        pending = []
        i += 1
    if pending:
        raise DocsError(f"{path}:{pending[0][0]}: a docs-test marker not right before a fence")
    return blocks


def _commands(block: DocBlock) -> list[Command]:
    if block.lang not in ("sh", "bash", "console"):
        raise DocsError(f"{block.name}: a {block.lang} block has no commands")
    console = block.lang == "console"
    out: list[Command] = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        raw = lines[i]
        line_no = block.line + 1 + i
        if console and not raw.startswith("$ "):
            if out:  # output of the command before (added below)
                i += 1
                continue
            raise DocsError(f"{block.path}:{line_no}: console output before any $ command")
        text = raw[2:] if console else raw
        if not console and (not text.strip() or text.lstrip().startswith("#")):
            i += 1
            continue
        parts = [text]
        while parts[-1].rstrip().endswith("\\") and i + 1 < len(lines):
            parts[-1] = parts[-1].rstrip()[:-1].rstrip()
            i += 1
            parts.append(lines[i].strip())
        i += 1
        expected: tuple[str, ...] | None = None
        if console:
            shown: list[str] = []
            while i < len(lines) and not lines[i].startswith("$ "):
                shown.append(lines[i].rstrip())
                i += 1
            while shown and not shown[-1]:
                shown.pop()
            expected = tuple(shown)
        out.append(
            Command(line=line_no, text=" ".join(p.strip() for p in parts), expected=expected)
        )
    return out


def output_matches(expected: tuple[str, ...], got: str) -> bool:
    """Whether ``got`` is the output shown: line by line, trailing blanks ignored, with
    ``...`` in an expected line matching any text within that line."""
    got_lines = [g.rstrip() for g in got.rstrip().splitlines()] if got.strip() else []
    if len(got_lines) != len(expected):
        return False
    for want, have in zip(expected, got_lines, strict=True):
        pattern = ".*".join(re.escape(piece) for piece in want.split("..."))
        if re.fullmatch(pattern, have) is None:
            return False
    return True


def doc_files(repo: Path = REPO) -> list[Path]:
    """README.md, then docs/*.md by name: the order the examples run in."""
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]


def all_blocks(repo: Path = REPO) -> list[DocBlock]:
    blocks: list[DocBlock] = []
    for f in doc_files(repo):
        blocks += extract_blocks(f.read_text(encoding="utf-8"), str(f.relative_to(repo)))
    return blocks


@dataclass(frozen=True, slots=True)
class DocCase:
    """One case of the docs test: a block to run, or one skipped command of it."""

    block: DocBlock
    skipped_command: Command | None = None

    @property
    def id(self) -> str:
        if self.skipped_command is None:
            return self.block.name
        return f"{self.block.path}:{self.skipped_command.line}:skipped-line"


def doc_cases(repo: Path = REPO) -> list[DocCase]:
    cases: list[DocCase] = []
    for block in all_blocks(repo):
        if block.lang not in RUN_LANGS:
            continue
        cases.append(DocCase(block))
        if block.skip is None and block.lang != "python":
            cases += [DocCase(block, c) for c in block.commands() if block.skipped(c)]
    return cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "doc_case" in metafunc.fixturenames:
        cases = doc_cases()
        metafunc.parametrize("doc_case", cases, ids=[c.id for c in cases])


@pytest.fixture(scope="session")
def docs_blocks() -> types.SimpleNamespace:
    """The extractor, for tests (they cannot import this module)."""
    return types.SimpleNamespace(
        REPO=REPO,
        RUN_LANGS=RUN_LANGS,
        CONFIG_LANGS=CONFIG_LANGS,
        TEXT_LANGS=TEXT_LANGS,
        Command=Command,
        DocBlock=DocBlock,
        DocCase=DocCase,
        DocsError=DocsError,
        all_blocks=all_blocks,
        doc_cases=doc_cases,
        doc_files=doc_files,
        extract_blocks=extract_blocks,
        output_matches=output_matches,
    )
