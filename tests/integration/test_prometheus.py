"""A real Prometheus server (Debian's ``prometheus``) scrapes a real cluster's brokers
every second; PromQL over its HTTP API sees the under-replicated partitions go from 0 to
at least 1 while a follower broker is paused (SIGSTOP) and back to 0 after SIGCONT, with
the ISR expansions that brought it back counted.

The test starts the binary itself, with its own configuration, a TSDB in the test's
temp folder and a free port: the package's system service plays no part. Without the
binary the test skips, except under CI (``CI`` set, as ``.ci/run`` does), which installs
it and must run it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftka.local import free_ports, wait_for
from raftka.testing import RaftkaCluster

PROMETHEUS = shutil.which("prometheus")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        PROMETHEUS is None and not os.environ.get("CI"),
        reason="the prometheus binary is not installed (Debian's prometheus; .ci/run installs it)",
    ),
]

UNDER_REPLICATED = "sum(kafka_server_replicamanager_underreplicatedpartitions)"
UP = 'count(up{job="raftka-brokers"} == 1)'
# Followers leave the ISR 2 s after their last caught-up fetch (Kafka's default is 30 s).
BROKER_PROPERTIES = {"replica.lag.time.max.ms": "2000"}
DEADLINE_S = 60.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RaftkaCluster]:
    with RaftkaCluster.start(tmp_path / "cluster", broker_properties=BROKER_PROPERTIES) as c:
        yield c


@pytest.fixture
def prometheus(tmp_path: Path, cluster: RaftkaCluster) -> Iterator[str]:
    """A Prometheus server scraping every broker each second; its address."""
    assert PROMETHEUS is not None, "CI must have the prometheus binary (.ci/run installs it)"
    targets = [cluster.brokers[i].address for i in cluster.brokers.ids]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(  # YAML is a superset of JSON
            {
                "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
                "scrape_configs": [
                    {"job_name": "raftka-brokers", "static_configs": [{"targets": targets}]}
                ],
            }
        )
    )
    address = f"127.0.0.1:{free_ports(1)[0]}"
    log_path = tmp_path / "prometheus.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address={address}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(
            lambda: _get(address, "/-/ready") is not None,
            timeout_s=DEADLINE_S,
            message=lambda: (
                f"prometheus is not ready: {(tmp_path / 'prometheus.log').read_text()[-2000:]}"
            ),
        )
        yield address
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _get(address: str, path: str) -> bytes | None:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as response:
            return bytes(response.read())
    except OSError:
        return None


def query(address: str, promql: str) -> float | None:
    """The value of an instant PromQL query with one result, None without one."""
    answer = _get(address, "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    if answer is None:
        return None
    data = json.loads(answer)
    assert data["status"] == "success", data
    result = data["data"]["result"]
    return None if not result else float(result[0]["value"][1])


def test_prometheus_sees_a_paused_follower(cluster: RaftkaCluster, prometheus: str) -> None:
    topic = cluster.create_topic(partitions=3, replication_factor=3)
    wait_for(
        lambda: query(prometheus, UP) == 3,
        timeout_s=DEADLINE_S,
        message="prometheus does not scrape the 3 brokers",
    )
    wait_for(
        lambda: query(prometheus, UNDER_REPLICATED) == 0,
        timeout_s=DEADLINE_S,
        message=lambda: (
            f"under-replicated partitions before the pause: {query(prometheus, UNDER_REPLICATED)}"
        ),
    )
    metadata = cluster.brokers.metadata(cluster.brokers.ids[0]) or {}
    partition = next(t for t in metadata["topics"] if t["name"] == topic)["partitions"][0]
    follower = next(b for b in partition["replicas"] if b != partition["leader"])
    node = cluster.brokers[follower]
    node.pause()
    try:
        wait_for(
            lambda: (query(prometheus, UNDER_REPLICATED) or 0) >= 1,
            timeout_s=DEADLINE_S,
            message=f"no under-replicated partition while broker {follower} is paused",
        )
    finally:
        node.resume()
    wait_for(
        lambda: (
            query(prometheus, UNDER_REPLICATED) == 0
            and query(prometheus, 'count(up{job="raftka-brokers"} == 1)') == 3
        ),
        timeout_s=DEADLINE_S,
        message=lambda: (
            f"still under-replicated after SIGCONT: {query(prometheus, UNDER_REPLICATED)}"
        ),
    )
    # The follower came back through the leaders' AlterPartition: ISR expansions counted.
    expands = "sum(kafka_server_replicamanager_isrexpands_total)"
    wait_for(
        lambda: (query(prometheus, expands) or 0) >= 1,
        timeout_s=DEADLINE_S,
        message=lambda: f"no ISR expansion counted: {query(prometheus, expands)}",
    )
