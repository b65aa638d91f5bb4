"""The web console in a real browser: Debian's chromium, headless, driven by selenium.

A cluster (3 controllers, 3 brokers as processes; brokers leave an ISR after 2 s behind
and a dead broker is fenced after a 3 s session) and ``python -m raftka console`` as its
own process. The page must show the active controller; a topic created through the CLI
must appear, a group's lag and the topic's records show; a SIGKILLed follower's
partitions must be marked under-replicated and the broker fenced while the console
keeps answering; and after the broker restarts every partition must be back in sync
and no error line left. Screenshots of each step go to the test's tmp_path.

Every wait is a WebDriverWait or wait_for with a deadline and a message.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from raftka.client import GroupAdmin, OffsetAndMetadata, Producer, TopicPartition
from raftka.common.errors import NotCoordinatorError
from raftka.local import free_ports, wait_for
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DEADLINE_S = 60.0
REPLICA_LAG_MS = 2_000
SESSION_MS = 3_000
PARTITIONS = 3
RECORDS = 10
COMMITTED = 4

webdriver = pytest.importorskip("selenium.webdriver")
if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
    pytest.skip(
        f"needs {CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )

from selenium.webdriver.common.by import By  # noqa: E402  (after the skip above)
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


@contextlib.contextmanager
def console_process(bootstrap: str, port: int, log: Path) -> Iterator[str]:
    """``python -m raftka console`` as a real process; its URL once it answers."""
    url = f"http://127.0.0.1:{port}/"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "raftka", "console", "--port", str(port)),
                *("--bootstrap-server", bootstrap, "--api-timeout-ms", "3000"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def answers() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"the console exited: {log.read_text()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for(answers, timeout_s=DEADLINE_S, message=f"the console at {url} never answered")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def chromium(profile: Path) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def rows(driver: webdriver.Chrome, selector: str) -> list[object]:
    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def wait_rows(driver: webdriver.Chrome, selector: str, count: int, what: str) -> None:
    WebDriverWait(driver, DEADLINE_S).until(
        lambda d: len(rows(d, selector)) == count,
        f"{what}: wanted {count} rows matching {selector}, "
        f"the page shows {len(rows(driver, selector))}",
    )


def api_cluster(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url + "api/cluster", timeout=10) as r:
        answer = orjson.loads(r.read())
    assert isinstance(answer, dict)
    return answer


def test_console_in_chromium(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(
            RaftkaCluster.start(
                tmp_path / "cluster",
                controller_properties={"broker.session.timeout.ms": str(SESSION_MS)},
                broker_properties={
                    "broker.session.timeout.ms": str(SESSION_MS),
                    "replica.lag.time.max.ms": str(REPLICA_LAG_MS),
                },
            )
        )
        (port,) = free_ports(1)
        url = stack.enter_context(
            console_process(cluster.bootstrap_servers, port, tmp_path / "console.log")
        )
        driver = stack.enter_context(chromium(tmp_path / "chromium-profile"))
        shots = tmp_path / "screenshots"
        shots.mkdir()
        driver.get(url)

        # 1. The overview: three controllers, one of them active; three unfenced brokers.
        wait_rows(driver, "#controllers td.active", 1, "the active controller")
        wait_rows(driver, "#brokers tr[data-state=unfenced]", 3, "unfenced brokers")
        driver.save_screenshot(str(shots / "1-overview.png"))

        # 2. A topic created through the CLI appears, every partition in sync.
        topic = cluster.unique_name("console")
        subprocess.run(
            [
                *(sys.executable, "-m", "raftka", "topics", "create", "--topic", topic),
                *("--partitions", str(PARTITIONS), "--replication-factor", "3"),
                *("--bootstrap-server", cluster.bootstrap_servers),
            ],
            check=True,
            capture_output=True,
            timeout=DEADLINE_S,
        )
        wait_rows(driver, f"#topics tr[data-topic='{topic}'][data-state=ok]", PARTITIONS, topic)

        # Records in partition 0 and a group that committed 4 of them: its lag shows 6,
        # and the message browser shows the JSON values indented.
        tp0 = TopicPartition(topic, 0)
        with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
            for i in range(RECORDS):
                producer.send(topic, key=f"k{i}".encode(), value=b'{"n":%d}' % i, partition=0)
            producer.flush()
        group = cluster.unique_name("console-group")
        with GroupAdmin(bootstrap_servers=cluster.bootstrap_servers) as groups:

            def committed() -> bool:
                # GroupAdmin.alter_offsets does not retry a per-partition NOT_COORDINATOR,
                # which the first commit meets while __consumer_offsets is being made.
                try:
                    groups.alter_offsets(group, {tp0: OffsetAndMetadata(COMMITTED, "")})
                except NotCoordinatorError:
                    return False
                return True

            wait_for(committed, timeout_s=DEADLINE_S, message=f"commit for {group}")
        WebDriverWait(driver, DEADLINE_S).until(
            lambda d: rows(d, f"#group-table tr[data-group='{group}']"), f"group {group} listed"
        )
        driver.find_element(By.CSS_SELECTOR, f"#group-table tr[data-group='{group}']").click()
        lag = f"{topic} 0 {COMMITTED} {RECORDS} {RECORDS - COMMITTED}"
        WebDriverWait(driver, DEADLINE_S).until(
            lambda d: lag in d.find_element(By.ID, "lag-table").text,
            f"the group's lag row {lag!r}",
        )
        driver.find_element(By.ID, "browse-topic").send_keys(topic)
        Select(driver.find_element(By.NAME, "format")).select_by_visible_text("json")
        driver.find_element(By.CSS_SELECTOR, "#browse button").click()
        WebDriverWait(driver, DEADLINE_S).until(
            lambda d: len(rows(d, "#record-table tbody tr")) == RECORDS,
            "the message browser's records",
        )
        assert '"n": 9' in driver.find_element(By.ID, "record-table").text
        driver.save_screenshot(str(shots / "2-topic-group-messages.png"))

        # 3. SIGKILL a follower of partition 0. It is a replica of every partition
        # (replication factor 3 on 3 brokers): the leaders drop it from their ISR after
        # replica.lag.time.max.ms and the controller fences it once its session ends,
        # so every partition ends up under-replicated, and the console keeps answering.
        (description,) = cluster.admin.describe_topics([topic])
        p0 = description.partitions[0]
        victim = next(r for r in p0.replicas if r != p0.leader)
        cluster.brokers.brokers[victim].kill()
        wait_rows(
            driver,
            f"#topics tr[data-topic='{topic}'][data-state=under-replicated]",
            PARTITIONS,
            f"partitions of the killed broker {victim}",
        )
        wait_rows(driver, f"#brokers tr[data-broker='{victim}'][data-state=fenced]", 1, "fenced")
        answer = api_cluster(url)
        overview = answer["overview"]
        assert isinstance(overview, dict)
        # (__consumer_offsets' partitions, made for the group, count here too.)
        assert overview["under_replicated"] >= PARTITIONS, overview
        topics = answer["topics"]
        assert isinstance(topics, list)
        (shown,) = [t for t in topics if t["name"] == topic]
        assert shown["under_replicated"] == PARTITIONS, shown
        driver.save_screenshot(str(shots / "3-follower-killed.png"))

        # 4. The broker restarts and catches up: every partition back in sync.
        cluster.brokers.brokers[victim].start()
        wait_rows(driver, f"#topics tr[data-topic='{topic}'][data-state=ok]", PARTITIONS, "ISR")
        wait_rows(driver, "#brokers tr[data-state=unfenced]", 3, "the restarted broker")
        driver.save_screenshot(str(shots / "4-recovered.png"))

        # Every panel answers again: no error line left.
        WebDriverWait(driver, DEADLINE_S).until(
            lambda d: not d.find_element(By.ID, "error").is_displayed(),
            "an error line stayed after the broker came back",
        )

    kept = os.environ.get("RAFTKA_CONSOLE_SCREENSHOTS")
    if kept:  # a place to look at them after the run (tmp_path is pruned)
        shutil.copytree(shots, kept, dirs_exist_ok=True)
