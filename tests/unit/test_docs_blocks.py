"""The docs' code-block extractor (``tests/conftest.py``), and the blocks that are not run.

- The extractor: language tags, the ``docs-test`` markers (skip, skip-line, fresh) and
  their errors, command joining, ``console`` output pairing and ``...`` matching.
- README.md and docs/*.md follow the convention: every block is fenced with a known
  tag, no indented code block is left, every marker parses.
- The config snippets raftka reads (``properties``, ``toml``) parse with the reader the
  processes use (``parse_properties`` / ``flatten_toml``, then ``combined_configs``,
  which checks a controller, a broker or a combined node), so they cannot rot.
- The skipped blocks' ``bench/`` and ``examples/`` scripts exist.
"""

from __future__ import annotations

import re
import tomllib
from types import SimpleNamespace

import pytest

from raftka.server_cli import combined_configs
from raftka.server_common.process_config import flatten_toml, parse_properties


def test_languages_markers_and_commands(docs_blocks: SimpleNamespace) -> None:
    text = """# t

```sh
raftka topics create --topic a \\
    --partitions 3   # two lines, one command
# a comment
raftka topics list
```

<!-- docs-test: skip (starts a server) -->
```python
print("never")
```

<!-- docs-test: fresh (wants no topics) -->
<!-- docs-test: skip-line raftka consume (reads until Ctrl-C) -->
```bash
raftka produce --topic a < lines.txt
raftka consume --topic a
```

```json
{"a": 1}
```
"""
    blocks = docs_blocks.extract_blocks(text, "x.md")
    assert [(b.line, b.lang) for b in blocks] == [
        (3, "sh"),
        (11, "python"),
        (17, "bash"),
        (22, "json"),
    ]
    first, second, third, _ = blocks
    assert first.skip is None and first.fresh is None and first.skip_lines == ()
    assert [(c.line, c.text) for c in first.commands()] == [
        (4, "raftka topics create --topic a --partitions 3   # two lines, one command"),
        (7, "raftka topics list"),
    ]
    assert second.skip == "starts a server" and second.text == 'print("never")\n'
    assert third.fresh == "wants no topics"
    assert third.skip_lines == (("raftka consume", "reads until Ctrl-C"),)
    produce, consume = third.commands()
    assert third.skipped(produce) is None
    assert third.skipped(consume) == "reads until Ctrl-C"
    assert blocks[0].name == "x.md:3:sh"


def test_console_pairs_commands_with_their_output(docs_blocks: SimpleNamespace) -> None:
    text = """```console
$ raftka topics describe --topic nope
Error: UNKNOWN_TOPIC_OR_PARTITION: topic 'nope' does not exist

$ raftka topics list \\
    --bootstrap-server 127.0.0.1:9092
Error: NETWORK_EXCEPTION: ...
$ true
```
"""
    (block,) = docs_blocks.extract_blocks(text, "x.md")
    commands = block.commands()
    assert [(c.line, c.text, c.expected) for c in commands] == [
        (
            2,
            "raftka topics describe --topic nope",
            ("Error: UNKNOWN_TOPIC_OR_PARTITION: topic 'nope' does not exist",),
        ),
        (
            5,
            "raftka topics list --bootstrap-server 127.0.0.1:9092",
            ("Error: NETWORK_EXCEPTION: ...",),
        ),
        (8, "true", ()),
    ]


def test_output_matching(docs_blocks: SimpleNamespace) -> None:
    match = docs_blocks.output_matches
    assert match(("a", "b"), "a  \nb\n\n")
    assert match(("offset ... at ...",), "offset 7 at 12:00")
    assert match((), "")
    assert not match(("a",), "a\nb\n")
    assert not match(("a", "b"), "a\n")
    assert not match(("offset ...",), "partition 1")
    assert not match(("x.y",), "xzy")  # only ... is special


def test_cases_report_each_skipped_command(docs_blocks: SimpleNamespace, tmp_path: object) -> None:
    block = docs_blocks.DocBlock(
        path="x.md",
        line=1,
        lang="sh",
        text="raftka up\nraftka status\n",
        skip_lines=(("raftka up", "stays in the foreground"),),
    )
    (up, status) = block.commands()
    case = docs_blocks.DocCase(block, up)
    assert case.id == "x.md:2:skipped-line"
    assert block.skipped(status) is None


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("```\nx\n```\n", "without a language tag"),
        ("```yaml\nx: 1\n```\n", "unknown language tag 'yaml'"),
        ("```sh\nls\n", "never closed"),
        ("<!-- docs-test: skip -->\n```sh\nls\n```\n", "bad docs-test marker"),
        ("<!-- docs-test: ignore (why) -->\n```sh\nls\n```\n", "bad docs-test marker"),
        ("<!-- docs-test: skip (why) -->\n\ntext\n```sh\nls\n```\n", "not right before a fence"),
        ("```sh\nls\n```\n<!-- docs-test: skip (why) -->\n", "not right before a fence"),
        ("<!-- docs-test: skip-line cat (why) -->\n```sh\nls\n```\n", "matches no command"),
        ("<!-- docs-test: skip-line (why) -->\n```sh\nls\n```\n", "takes a command prefix"),
        ("<!-- docs-test: skip-line p (why) -->\n```python\np()\n```\n", "matches no command"),
        ("<!-- docs-test: fresh (a) -->\n```json\n{}\n```\n", "only skip applies"),
        (
            "<!-- docs-test: skip (a) -->\n<!-- docs-test: fresh (b) -->\n```sh\nls\n```\n",
            "conflicting",
        ),
        ("```console\nno command\n```\n", None),  # raised by commands(), below
    ],
)
def test_errors_name_file_and_line(
    docs_blocks: SimpleNamespace, text: str, error: str | None
) -> None:
    with pytest.raises(docs_blocks.DocsError, match=re.escape(error or "output before any $")) as e:
        for block in docs_blocks.extract_blocks(text, "x.md"):
            block.commands()
    assert re.match(r"x\.md:\d+", str(e.value))


def test_the_docs_follow_the_convention(docs_blocks: SimpleNamespace) -> None:
    """Every block of README.md and docs/*.md extracts (fenced, tagged, markers valid);
    the runnable ones are what the integration test runs."""
    blocks = docs_blocks.all_blocks()
    assert {b.path for b in blocks} == {
        str(f.relative_to(docs_blocks.REPO)) for f in docs_blocks.doc_files()
    }
    runnable = [b for b in blocks if b.lang in docs_blocks.RUN_LANGS]
    assert [c.block for c in docs_blocks.doc_cases() if c.skipped_command is None] == runnable
    assert any(b.skip is None for b in runnable)


def _indented_code_lines(text: str) -> list[int]:
    """Lines that start an indented (unfenced, untagged) code block: indented 4 spaces
    after a blank line, outside fences, not continuing a list item."""
    lines = text.splitlines()
    found: list[int] = []
    fence: str | None = None
    for i, line in enumerate(lines):
        m = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if m:
            fence = None if fence else m[1]
            continue
        if fence or not line.startswith("    ") or not line.strip() or i == 0:
            continue
        if lines[i - 1].strip():
            continue
        j = i - 2
        while j >= 0 and not lines[j].strip():
            j -= 1
        before = lines[j] if j >= 0 else ""
        if re.match(r"^\s*([-*+]|\d+\.)\s", before) or before.startswith(" "):
            continue
        found.append(i + 1)
    return found


def test_no_indented_code_blocks(docs_blocks: SimpleNamespace) -> None:
    """An indented code block has no language tag and would escape the docs test."""
    assert _indented_code_lines("text\n\n    code\n") == [3]
    assert _indented_code_lines("- item\n\n    more of the item\n") == []
    assert _indented_code_lines("```sh\n\n    inside\n```\n") == []
    for f in docs_blocks.doc_files():
        found = _indented_code_lines(f.read_text(encoding="utf-8"))
        assert not found, f"{f.name}: indented code blocks at lines {found}: fence and tag them"


def test_config_snippets_parse_with_the_processes_reader(docs_blocks: SimpleNamespace) -> None:
    """Each properties/toml block is a controller, broker or combined node's file."""
    configs = [b for b in docs_blocks.all_blocks() if b.lang in docs_blocks.CONFIG_LANGS]
    assert configs, "the docs show config files"
    for block in configs:
        if block.lang == "properties":
            props = parse_properties(block.text, source=block.name)
        else:
            props = flatten_toml(tomllib.loads(block.text), source=block.name)
        controller, broker = combined_configs(props, source=block.name)
        roles = {r.strip() for r in props["process.roles"].split(",")}
        assert (controller is not None, broker is not None) == (
            "controller" in roles,
            "broker" in roles,
        ), block.name


def test_skipped_blocks_name_scripts_that_exist(docs_blocks: SimpleNamespace) -> None:
    """A block that is not run still may not name a bench/ or examples/ script that is gone."""
    named: list[tuple[str, str]] = []
    for block in docs_blocks.all_blocks():
        if block.lang in ("sh", "bash", "console"):
            for command in block.commands():
                named += [
                    (block.name, m)
                    for m in re.findall(r"(?:bench|examples)/[\w/.-]+\.py", command.text)
                ]
    assert named
    missing = [(where, path) for where, path in named if not (docs_blocks.REPO / path).is_file()]
    assert not missing
