"""Every runnable code block of README.md and docs/*.md, run against ``raftka up``.

The convention the docs follow (language tags, the ``<!-- docs-test: ... -->`` markers,
how ``console`` output is compared) is written at the top of ``tests/conftest.py``,
which holds the extractor; ``tests/unit/test_docs_blocks.py`` tests it and parses the
config snippets. Here:

- One ``raftka up`` (3 controllers, 3 brokers) runs for the module on its default
  ports, 9093-9098, so the addresses the docs print (``127.0.0.1:9096``, ...) are
  literally right and nothing in a block is rewritten. If one of those ports is taken
  the module is skipped, saying which.
- Blocks run in reading order (README.md, then docs/*.md by name), one case per
  block, against the same cluster: a later example may use a topic an earlier one
  made, as a reader's cluster would have it. A block marked ``fresh`` starts with
  every non-internal topic deleted.
- Commands run with bash (``-o pipefail``) in a working directory that holds the
  cluster's data directory as ``./raftka-data`` (so ``raftka status`` and the
  commands' default cluster are the test's) and ``lines.txt``, the input of
  docs/client.md's ``raftka produce ... < lines.txt`` (four lines: with the other
  produce examples there, orders then holds the 10 records its
  ``raftka consume --max-messages 10`` waits for). ``.venv/bin/`` in a
  command is the bin directory of the interpreter running the tests, which is also
  first on PATH for a bare ``raftka``; ``$RAFTKA_BOOTSTRAP_SERVERS`` is unset.
- ``python`` blocks run as one program each in a subprocess, with the same directory.
- Skipped blocks and skipped commands are cases that report ``pytest.skip`` with the
  marker's reason, so ``-ra`` lists each.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from raftka.client import Admin
from raftka.local import wait_for
from raftka.local.processes import port_in_use

pytestmark = pytest.mark.slow

HOST = "127.0.0.1"
# raftka up's defaults: controllers 9093-9095, brokers 9096-9098, Kafka listeners 9099-9101,
# the web console 9102
PORTS = range(9093, 9103)
BOOTSTRAP = "127.0.0.1:9096,127.0.0.1:9097,127.0.0.1:9098"
UP_DEADLINE_S = 90.0
COMMAND_TIMEOUT_S = 90.0
BIN = Path(sys.executable).parent
_VENV_BIN = re.compile(r"(?<![\w/.-])\.venv/bin/")


@dataclass(frozen=True, slots=True)
class DocsEnv:
    work: Path
    env: dict[str, str]

    def run(self, command: str, *, merge: bool = False) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                ["bash", "-o", "pipefail", "-c", _VENV_BIN.sub(f"{BIN}/", command)],
                cwd=self.work,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merge else subprocess.PIPE,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            pytest.fail(
                f"`{command}` still ran after {COMMAND_TIMEOUT_S:g} s (an example must end "
                f"by itself); it printed:\n{e.stdout!r}\n{e.stderr!r}"
            )

    def delete_topics(self) -> None:
        with Admin(bootstrap_servers=BOOTSTRAP, default_api_timeout_ms=30_000) as admin:
            topics = admin.list_topics()
            if topics:
                admin.delete_topics(sorted(topics))
            wait_for(
                lambda: not admin.list_topics(),
                timeout_s=30,
                message=lambda: f"topics still listed: {admin.list_topics()}",
            )


@pytest.fixture(scope="module")
def docs_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocsEnv]:
    taken = [p for p in PORTS if port_in_use(HOST, p)]
    if taken:
        pytest.skip(
            f"ports {taken} on {HOST} are in use: the docs name raftka up's default ports "
            "(9093-9101), so the test runs raftka up on exactly those"
        )
    raftka = BIN / "raftka"
    assert raftka.exists(), f"{raftka} missing: install raftka into {sys.prefix}"
    work = tmp_path_factory.mktemp("docs")
    (work / "lines.txt").write_text("one\ntwo\nthree\nfour\n")
    env = {k: v for k, v in os.environ.items() if k != "RAFTKA_BOOTSTRAP_SERVERS"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    log = work / "up.log"
    with log.open("wb") as out:
        up = subprocess.Popen(
            [str(raftka), "up", "--data-dir", str(work / "raftka-data")],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def printed_bootstrap() -> str | None:
            text = log.read_text()
            assert up.poll() is None, f"raftka up exited {up.returncode}:\n{text}"
            m = re.search(r"^bootstrap servers: (\S+)$", text, re.MULTILINE)
            return m[1] if m else None

        printed = wait_for(
            printed_bootstrap, timeout_s=UP_DEADLINE_S, message=lambda: log.read_text()[-3000:]
        )
        assert printed == BOOTSTRAP, "raftka up's default ports are not the ones the docs name"
        yield DocsEnv(work=work, env=env)
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
            try:
                up.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
                up.wait()
    assert up.returncode == 0, log.read_text()[-3000:]


def _show(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


def test_doc_example(doc_case: Any, docs_env: DocsEnv, docs_blocks: Any) -> None:
    """One block of the docs (or one command its marker skips): it runs, exits 0, and
    prints what the docs show."""
    block = doc_case.block
    skipped = doc_case.skipped_command
    if skipped is not None:
        pytest.skip(f"{doc_case.id} `{skipped.text}`: {block.skipped(skipped)}")
    if block.skip is not None:
        pytest.skip(f"{block.name}: {block.skip}")
    if block.fresh is not None:
        docs_env.delete_topics()
    if block.lang == "python":
        program = docs_env.work / f"{Path(block.path).stem}_{block.line}.py"
        program.write_text(block.text)
        done = docs_env.run(f"{sys.executable} {program.name}")
        assert done.returncode == 0, f"{block.name}: {_show(done)}"
        return
    for command in block.commands():
        if block.skipped(command) is not None:
            continue
        where = f"{block.path}:{command.line} `{command.text}`"
        if command.expected is None:
            done = docs_env.run(command.text)
            assert done.returncode == 0, f"{where}: {_show(done)}"
        else:
            done = docs_env.run(command.text, merge=True)
            shown = "\n".join(command.expected)
            assert docs_blocks.output_matches(command.expected, done.stdout), (
                f"{where}: the docs show\n{shown}\nbut it printed\n{done.stdout}"
            )
