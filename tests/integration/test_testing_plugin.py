"""The pytest plugin users get with raftka (:mod:`raftka.testing`): a user's own test
file, run by pytester in a child pytest (the plugin loaded through its ``pytest11``
entry point, as in a user's project), produces and consumes through the
``raftka_cluster`` and ``raftka_topic`` fixtures against real processes.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.slow

USER_TEST = """
from raftka.client import Consumer, Producer, TopicPartition


def test_round_trip(raftka_cluster, raftka_topic):
    topic = raftka_topic(partitions=2)
    assert len(raftka_cluster.brokers.ids) == 3
    assert len(raftka_cluster.controllers.controllers) == 3
    with Producer(bootstrap_servers=raftka_cluster.bootstrap_servers) as producer:
        acked = [producer.send(topic, b"v%d" % i, partition=i % 2) for i in range(6)]
        producer.flush(timeout_ms=20_000)
        assert sorted((f.result(0).partition, f.result(0).offset) for f in acked) == [
            (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)
        ]
    with Consumer(
        bootstrap_servers=raftka_cluster.bootstrap_servers, auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        got = []
        for _ in range(40):
            for records in consumer.poll(500).values():
                got.extend(r.value for r in records)
            if len(got) == 6:
                break
    assert sorted(got) == [b"v%d" % i for i in range(6)]


def test_topics_are_unique(raftka_topic):
    assert raftka_topic() != raftka_topic()
"""


def test_user_tests_use_the_fixtures(pytester: pytest.Pytester) -> None:
    """Two user tests in a child pytest session share one cluster: a produce/consume
    round trip through a fixture-made topic, and two factory calls giving two names."""
    pytester.makepyfile(test_user=USER_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=240)
    result.assert_outcomes(passed=2)


def test_plugin_import_is_cheap() -> None:
    """Importing the plugin (which pytest does in every session) loads no cluster or
    client code and starts nothing."""
    code = (
        "import sys, threading, raftka.testing\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('raftka.'))\n"
        "assert loaded == ['raftka.testing'], loaded\n"
        "assert threading.active_count() == 1\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
