"""``raftka groups list`` with a broker down: 3 controllers + 3 brokers as processes.

A group commits offsets; a broker that does not coordinate it is killed (kill -9).
Until the controller fences it (broker.session.timeout.ms, 9 s by default) the
metadata still names it live: ``groups list`` asks it, gets no answer, lists the group
anyway and names the broker on stderr, exit code 0. Once it is fenced the metadata no
longer names it: the list is asked of the other two only, without a warning.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from group_helpers import commit_offsets

from raftka.client.cli.groups import groups_command
from raftka.client.group_admin import GroupAdmin
from raftka.client.structs import OffsetAndMetadata
from raftka.common.structs import TopicPartition
from raftka.local import wait_for
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

API_TIMEOUT_MS = 5_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RaftkaCluster]:
    with RaftkaCluster.start(Path(tmp_path_factory.mktemp("groups-list"))) as started:
        yield started


def test_groups_list_names_a_dead_broker_and_lists_the_rest(cluster: RaftkaCluster) -> None:
    topic = cluster.create_topic(partitions=1, replication_factor=3)
    group = cluster.unique_name("listed")
    with GroupAdmin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        offsets = {TopicPartition(topic, 0): OffsetAndMetadata(0)}
        coordinator = commit_offsets(admin, group, offsets)
    victim = max(b for b in cluster.brokers.ids if b != coordinator)
    runner = CliRunner()

    def groups_list() -> tuple[str, str]:
        result = runner.invoke(
            groups_command,
            [
                "list",
                "--bootstrap-server",
                cluster.bootstrap_servers,
                "--api-timeout-ms",
                str(API_TIMEOUT_MS),
            ],
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output
        return result.stdout, result.stderr

    cluster.brokers[victim].kill()
    out, err = groups_list()
    assert group in out
    assert f"warning: broker {victim} did not answer" in err, err

    def fenced() -> bool:
        with GroupAdmin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            return admin.list_groups_result(timeout_ms=API_TIMEOUT_MS).errors == {}

    # Fenced: the metadata no longer names it, so nobody asks it.
    wait_for(fenced, timeout_s=30, message=f"broker {victim} never left the metadata")
    out, err = groups_list()
    assert group in out and err == "", err
