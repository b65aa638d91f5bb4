"""The txn workload (transactions and a consume-transform-produce pipeline) under
process faults: kill -9 of the transaction coordinator's broker, of the pipeline
process and of a partition leader, each restarted on heal.

The cluster runs on network-namespace hosts when root, else on loopback. Each test
asserts what every scenario asserts (see conftest.scenario): the txn checker finds no
aborted read, torn or lost transaction, duplicate, out-of-order read_committed read or
pipeline output not exactly once; the final reads complete; recovery is in bound.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from raftka.chaos.nodes import ChaosCluster
from raftka.chaos.runner import RunResult, ScheduledFault, run_on
from raftka.chaos.txn_workload import TxnConfig
from raftka.local import wait_for

SEED = 20261121  # any fixed seed: the schedule is given, the seed only draws values
RECOVERY_TIMEOUT_S = 60.0

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosCluster]:
    data = tmp_path_factory.mktemp("chaos-txn")
    placement = "netns" if os.geteuid() == 0 else "loopback"
    prefix = f"rkt{os.getpid() % 10000:04d}"
    with ChaosCluster.create(data, placement=placement, prefix=prefix) as c:
        c.start()
        yield c


def test_txn_coordinator_and_pipeline_killed(
    cluster: ChaosCluster, scenario: Callable[..., RunResult]
) -> None:
    """The transaction coordinator's broker is killed mid-run (its transactions time
    out or complete on the new coordinator), then the pipeline process (its open
    transaction is aborted when the restarted one fences it): every committed
    transaction is whole, no aborted one is read, each input is output once."""
    faults = [
        ScheduledFault(1.5, "kill-txn-coordinator", (), 6.0),
        ScheduledFault(10.0, "kill-pipeline", (), 4.0),
    ]
    result = scenario(cluster, "txnkill", faults, workload="txn")
    assert result.txn is not None and result.txn.stats.pipeline_inputs > 0


def test_txn_partition_leader_killed(
    cluster: ChaosCluster, scenario: Callable[..., RunResult]
) -> None:
    """kill -9 of a transactional partition's leader: the markers of open transactions
    reach the new leader, so read_committed readers see them whole or not at all."""
    # At 1.5 s, while the producers are still in init_transactions. CI once failed
    # here (2026-11-28): the __transaction_state partition had only the killed broker
    # in its ISR (both followers dropped under load), so no producer initialised for
    # the whole run. Eligible leader replicas (KIP-966) now elect a follower instead.
    faults = [ScheduledFault(1.5, "kill-leader", (), 6.0, (("partition", 1.0),))]
    scenario(cluster, "txnleader", faults, workload="txn")


def test_checker_bites_read_uncommitted_readers(cluster: ChaosCluster, tmp_path: Path) -> None:
    """Negative control: the same workload with read_uncommitted readers (and final
    read) must be reported as aborted reads, or the zero above would prove nothing."""
    # CI once failed here (2026-11-29) with no transaction at all in the 8 s run, right
    # after the test before had killed and restarted a broker. One possible cause: an
    # internal topic then had only two replicas (the coordinator topics' replication was
    # capped at the live brokers; since 2026-11-29 it is not created until enough are
    # up), and an internal partition whose restarted replica is not yet back in its ISR
    # takes no write with min.insync.replicas=2. So: wait for every internal partition
    # to have all its replicas in sync, and give the transactions longer around the
    # pipeline's kill.
    internal = ("__transaction_state", "__consumer_offsets")
    wait_for(
        lambda: all(cluster.replicas_in_sync(t) for t in internal),
        timeout_s=RECOVERY_TIMEOUT_S,
        message=f"{internal}: not every partition has all its replicas in sync",
    )
    out = tmp_path / "uncommitted"
    result = run_on(
        cluster,
        nemeses=["kill-pipeline"],
        duration_s=12.0,
        seed=SEED,
        out_dir=out,
        schedule=[ScheduledFault(4.0, "kill-pipeline", (), 3.0)],
        topic="txnuncommitted",
        workload="txn",
        txn_config=TxnConfig(reader_isolation="read_uncommitted"),
    )
    print(f"\nuncommitted ({cluster.placement}): {result.summary()}")
    assert result.txn is not None and result.txn.stats.aborted > 0, result.summary()
    assert result.txn.counts["aborted_read"] > 0, result.summary()
    assert not result.valid
