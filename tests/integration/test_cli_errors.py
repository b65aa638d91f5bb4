"""What a person sees when a ``raftka`` command fails, and the two command grammars,
run as real subprocesses the way a user types them (stdin from a pipe) against one
cluster (3 controllers + 3 brokers as processes) started once for this module.

Each failure must be one line on stderr naming Kafka's error, a non-zero exit status
and no traceback (never the interpreter's abort, exit 134): a record the producer
rejects while stdin is still an open pipe (ten times: the abort was intermittent), a
line over 1 MiB with and without ``--ignore-errors``, empty topic and group names, a
consume against an address where nothing listens (bounded by ``--timeout-ms``).
``raftka status`` exits 0 only while healthy and 1 with a broker stopped; ``--wait``
blocks until the cluster is healthy again. The status test stops a broker, so it runs
last and leaves the broker running again.

Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import orjson
import pytest

from raftka.client import TopicPartition
from raftka.local import free_ports, wait_for
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

DEADLINE_S = 60.0
API_TIMEOUT_MS = 20_000
MIB = 1024 * 1024
#: How many times the piped-stdin rejection runs (the abort hit 3 runs in 5).
REJECTION_RUNS = 10


class Env(RaftkaCluster):
    def end_offset(self, topic: str) -> int:
        tp = TopicPartition(topic, 0)
        return self.admin.list_offsets({tp: "latest"}, timeout_ms=API_TIMEOUT_MS)[tp].offset


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    # A short broker session, so a restarted broker registers again quickly.
    with Env.start(
        tmp_path_factory.mktemp("cli-errors"),
        broker_properties={"broker.session.timeout.ms": "3000"},
    ) as env:
        yield env


_CHILD_ENV = {**os.environ, "RAFTKA_BOOTSTRAP_SERVERS": ""}


def _raftka(
    *args: str, stdin: bytes = b"", timeout_s: float = DEADLINE_S
) -> subprocess.CompletedProcess[bytes]:
    """The real command in a child process, stdin from a pipe (bounded)."""
    return subprocess.run(
        [sys.executable, "-m", "raftka", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout_s,
        env=_CHILD_ENV,
        check=False,
    )


def _one_line_error(returncode: int, stderr_bytes: bytes, *parts: str) -> str:
    """Assert a failure shown as one line holding every part; that line."""
    stderr = stderr_bytes.decode(errors="replace")
    # 134 is the shell's view of an abort; a child's returncode shows it as -SIGABRT.
    assert returncode not in (0, 134, -signal.SIGABRT), (returncode, stderr)
    assert "Traceback" not in stderr and "Fatal Python error" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    for part in parts:
        assert part in lines[0], stderr
    return lines[0]


def _consume_all(env: Env, topic: str, count: int) -> list[bytes]:
    """The first ``count`` values of partition 0, through the command line."""
    done = _raftka(
        "consume", "--topic", topic, "--bootstrap-server", env.bootstrap_servers,
        "--from-beginning", "--max-messages", str(count), "--timeout-ms", "20000",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.splitlines()


def test_a_rejected_record_with_stdin_still_open_never_aborts(env: Env) -> None:
    """Ten runs of ``raftka produce`` fed a good line and then a record the producer
    rejects, through a pipe left open (the old daemon stdin reader was blocked in a
    read there when the command ended, and the interpreter aborted with exit 134).
    Each run: exit 1, one MESSAGE_TOO_LARGE line naming line 2 and the one record
    delivered before it, no traceback; every good line arrived. The rejection
    alternates between a line over max_request_size (never held by the command) and
    one just under it, refused once the record overhead is added (its batch would
    exceed the topic's max.message.bytes)."""
    topic = "cli-rejected"
    env.create_topic(topic)
    for run in range(REJECTION_RUNS):
        rejected = b"x" * (2 * MIB if run % 2 == 0 else MIB - 16)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "raftka",
                "produce",
                topic,
                "--bootstrap-server",
                env.bootstrap_servers,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_CHILD_ENV,
        )
        assert proc.stdin is not None and proc.stderr is not None
        try:
            try:
                proc.stdin.write(b"good-%d\n" % run + rejected + b"\nnever-sent\n")
                proc.stdin.flush()
            except BrokenPipeError:
                pass  # the command stopped reading at the rejected line, as it should
            # stdin stays open (no EOF): the command must end by itself. Its output
            # is one line, so waiting before reading the pipes cannot deadlock.
            returncode = proc.wait(timeout=DEADLINE_S)
            stderr = proc.stderr.read()
        finally:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stderr.close()
            if proc.stdout is not None:
                proc.stdout.close()
        assert returncode == 1, (run, returncode, stderr.decode(errors="replace"))
        line = _one_line_error(
            returncode, stderr, "MESSAGE_TOO_LARGE", "line 2", "1 record before it delivered"
        )
        assert line.startswith("Error: MESSAGE_TOO_LARGE: "), (run, line)
    assert env.end_offset(topic) == REJECTION_RUNS
    assert _consume_all(env, topic, REJECTION_RUNS) == [
        b"good-%d" % i for i in range(REJECTION_RUNS)
    ]


def test_a_line_over_1_mib_is_fatal_or_skipped_with_ignore_errors(env: Env) -> None:
    """A 2 MiB line between short ones: by default the command stops there after the
    line before it was delivered (exit 1, one MESSAGE_TOO_LARGE line saying so; the
    lines after it are not sent, and the error says that too); with --ignore-errors
    the line is reported as skipped and every other line is delivered (exit 0)."""
    lines = b"before\n" + b"y" * (2 * MIB) + b"\nafter-1\nafter-2\n"
    fatal, skipping = "cli-big-fatal", "cli-big-skip"
    env.create_topic(fatal)
    env.create_topic(skipping)
    bootstrap = ["--bootstrap-server", env.bootstrap_servers]

    done = _raftka("produce", "--topic", fatal, *bootstrap, stdin=lines)
    assert done.returncode == 1
    _one_line_error(
        done.returncode, done.stderr, "MESSAGE_TOO_LARGE", "line 2", "2097152 bytes",
        "1 record before it delivered", "nothing after it was sent", "--ignore-errors",
    )  # fmt: skip
    assert env.end_offset(fatal) == 1
    assert _consume_all(env, fatal, 1) == [b"before"]

    done = _raftka("produce", "--topic", skipping, "--ignore-errors", *bootstrap, stdin=lines)
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert stderr.splitlines() == [
        "Skipped line 2: MESSAGE_TOO_LARGE: the line is 2097152 bytes, larger than "
        "max_request_size=1048576"
    ]
    assert _consume_all(env, skipping, 3) == [b"before", b"after-1", b"after-2"]
    assert env.end_offset(skipping) == 3


def test_a_record_over_the_topics_max_message_bytes_does_not_take_its_batch_down(
    env: Env,
) -> None:
    """A topic with max.message.bytes=300 and a 1000-byte line between two short ones:
    the command refuses that line itself (MESSAGE_TOO_LARGE naming the topic's limit),
    so the short lines are not lost with it in one refused batch (the broker refuses
    a whole batch, and the producer does not split it): by default exit 1 after the
    first line; with --ignore-errors both short lines arrive. Fifty small lines fill
    several batches that each stay under the limit."""
    topic = "cli-small-messages"
    env.create_topic(topic, configs={"max.message.bytes": "300"})
    bootstrap = ["--bootstrap-server", env.bootstrap_servers]
    lines = b"first\n" + b"b" * 1000 + b"\nlast\n"
    done = _raftka("produce", "--topic", topic, *bootstrap, stdin=lines)
    assert done.returncode == 1
    _one_line_error(
        done.returncode, done.stderr, "MESSAGE_TOO_LARGE: line 2:", "max.message.bytes=300",
        "1 record before it delivered",
    )  # fmt: skip
    done = _raftka("produce", "--topic", topic, "--ignore-errors", *bootstrap, stdin=lines)
    assert done.returncode == 0, done.stderr.decode()
    small = b"".join(b"small-%02d\n" % i for i in range(50))
    done = _raftka("produce", "--topic", topic, *bootstrap, stdin=small)
    assert done.returncode == 0, done.stderr.decode()
    assert _consume_all(env, topic, 53) == [b"first", b"first", b"last"] + [
        b"small-%02d" % i for i in range(50)
    ]


def test_empty_names_are_one_line_kafka_errors(env: Env) -> None:
    """An empty topic (create, produce, consume, describe) is INVALID_TOPIC_EXCEPTION
    and an empty group (groups describe, consume --group) is INVALID_GROUP_ID: one
    line, exit 1, no traceback, whichever grammar names it."""
    bootstrap = ["--bootstrap-server", env.bootstrap_servers]
    for args in (
        ("topics", "create", "--topic", ""),
        ("topics", "create", ""),
        ("topics", "describe", "--topic", ""),
        ("produce", "--topic", ""),
        ("consume", ""),
    ):
        done = _raftka(*args, *bootstrap, stdin=b"x\n")
        assert done.returncode == 1, args
        _one_line_error(
            done.returncode, done.stderr, "Error: INVALID_TOPIC_EXCEPTION: topic name is illegal"
        )
    for args in (
        ("groups", "describe", "--group", ""),
        ("groups", "delete", ""),
        ("consume", "--topic", "t", "--group", ""),
    ):
        done = _raftka(*args, *bootstrap)
        assert done.returncode == 1, args
        _one_line_error(done.returncode, done.stderr, "Error: INVALID_GROUP_ID: ")


def test_consume_from_an_unreachable_address_is_bounded_and_says_refused() -> None:
    """Nothing listens at the address: ``consume --timeout-ms 2000`` ends within a few
    seconds of that (it took 15 s, the default --api-timeout-ms) with one line that
    names the address and says "connection refused" (not aiohttp's exception text)."""
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    started = time.monotonic()
    done = _raftka("consume", "--topic", "t", "--bootstrap-server", address, "--timeout-ms", "2000")
    elapsed_s = time.monotonic() - started
    line = _one_line_error(
        done.returncode, done.stderr, "NETWORK_EXCEPTION", address, "connection refused"
    )
    assert line == f"Error: NETWORK_EXCEPTION: cannot connect to {address}: connection refused"
    assert "ssl:default" not in line
    # 2 s of timeout, plus an interpreter's start on a busy machine.
    assert elapsed_s < 2 + 6, f"took {elapsed_s:.1f} s"


def test_kafka_options_and_positional_names_are_the_same_command(env: Env) -> None:
    """Each command accepts Kafka's option form and raftka's positional form with the
    same effect: topics create/describe/alter/delete, produce, consume, groups
    describe/delete. Two different names for one slot are a usage error."""
    bootstrap = ["--bootstrap-server", env.bootstrap_servers]

    def ok(*args: str, stdin: bytes = b"") -> str:
        done = _raftka(*args, *bootstrap, stdin=stdin)
        assert done.returncode == 0, (args, done.stderr.decode())
        return done.stdout.decode()

    assert ok("topics", "create", "cli-positional") == "Created topic cli-positional.\n"
    assert ok("topics", "create", "--topic", "cli-option") == "Created topic cli-option.\n"
    for topic in ("cli-positional", "cli-option"):
        wait_for(
            lambda topic=topic: all(
                any(
                    t["name"] == topic
                    for t in (env.brokers.metadata(b) or {"topics": []})["topics"]
                )
                for b in env.brokers.ids
            ),
            timeout_s=DEADLINE_S,
            message=f"{topic} not known everywhere",
        )
    positional = ok("topics", "describe", "cli-positional").splitlines()
    option = ok("topics", "describe", "--topic", "cli-positional").splitlines()
    assert positional == option and positional[0].startswith("Topic: cli-positional\t")
    ok("topics", "alter", "cli-option", "--add-config", "retention.ms=600000")
    ok("topics", "alter", "--topic", "cli-option", "--partitions", "2")
    assert "retention.ms=600000" in ok("topics", "describe", "cli-option").splitlines()[0]

    ok("produce", "cli-positional", stdin=b"p1\n")
    ok("produce", "--topic", "cli-positional", stdin=b"p2\n")
    for form in (("cli-positional",), ("--topic", "cli-positional")):
        out = ok(
            "consume", *form, "--from-beginning", "--max-messages", "2", "--timeout-ms", "20000"
        )
        assert out.splitlines() == ["p1", "p2"], form

    ok("consume", "--topic", "cli-positional", "--group", "cli-g", "--from-beginning",
       "--max-messages", "2", "--timeout-ms", "20000")  # fmt: skip
    positional = ok("groups", "describe", "cli-g").splitlines()
    option = ok("groups", "describe", "--group", "cli-g").splitlines()
    assert positional[0].startswith("group cli-g: ") and option[0].startswith("group cli-g: ")
    assert positional[-1].split("\t")[:3] == option[-1].split("\t")[:3]

    mixed = _raftka("produce", "cli-positional", "--topic", "cli-option", *bootstrap)
    assert mixed.returncode == 2 and b"one topic only" in mixed.stderr

    assert ok("groups", "delete", "--group", "cli-g") == "Deleted group cli-g.\n"
    assert ok("topics", "delete", "cli-positional", "--topic", "cli-option") == (
        "Deleted topic cli-positional.\nDeleted topic cli-option.\n"
    )


def _status(
    env: Env, *args: str, timeout_s: float = DEADLINE_S
) -> subprocess.CompletedProcess[bytes]:
    return _raftka(
        "status", "--bootstrap-controller", env.controllers.bootstrap_controllers, *args,
        timeout_s=timeout_s,
    )  # fmt: skip


def test_status_exit_code_follows_health_and_wait_blocks_until_healthy(env: Env) -> None:
    """Healthy: exit 0 and "cluster: healthy" (from a controller, and from a broker
    with --bootstrap-server). A broker killed: exit 1, the screen
    says NOT healthy naming it, stderr one line; ``--wait 1`` still 1, after about
    a second. ``--wait`` started while it is down returns 0 only once the restarted
    broker is back and every partition has its full ISR (its JSON, printed at the end,
    shows every broker unfenced). Runs last: it stops a broker."""
    wait_for(
        lambda: _status(env).returncode == 0,
        timeout_s=DEADLINE_S,
        message=lambda: _status(env).stdout.decode()[:2000],
    )
    healthy = _status(env)
    assert healthy.stdout.decode().startswith("cluster: healthy\n")
    assert healthy.stderr == b""
    # The same view found through a broker, as Kafka's tools take --bootstrap-server.
    through_broker = _raftka("status", "--bootstrap-server", env.bootstrap_servers)
    assert through_broker.returncode == 0, through_broker.stderr.decode()
    assert through_broker.stdout.decode().startswith("cluster: healthy\n")

    broker = env.brokers[env.brokers.ids[-1]]
    broker.kill()
    down = _status(env)
    assert down.returncode == 1
    assert down.stdout.decode().startswith(f"cluster: NOT healthy: broker {broker.node_id} ")
    _one_line_error(down.returncode, down.stderr, "the cluster is not healthy")

    started = time.monotonic()
    short = _status(env, "--wait", "1")
    assert short.returncode == 1
    _one_line_error(short.returncode, short.stderr, "not healthy after waiting 1 s")
    assert time.monotonic() - started >= 1.0

    waiting = subprocess.Popen(
        [sys.executable, "-m", "raftka", "status", "--bootstrap-controller",
         env.controllers.bootstrap_controllers, "--wait", "120", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_CHILD_ENV,
    )  # fmt: skip
    try:
        broker.restart()
        stdout, stderr = waiting.communicate(timeout=150)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 0, stderr.decode()
    view = orjson.loads(stdout)
    assert view["healthy"] is True and view["problems"] == []
    assert {b["state"] for b in view["brokers"]} == {"unfenced"}
    assert all(sorted(p["isr"]) == sorted(p["replicas"]) for p in view["partitions"])
