"""A restarted broker's start-up replay does not depend on how the log reaches it
(issue #19, 3).

Before the "crash" broker 1 led ``t-0`` at epoch 0 and appended three records (its
leader-epoch cache holds ``(0, 0)``). After the restart it replays a metadata history
from scratch: the partition created with some leader at epoch 0, then random leader
changes, each at the next epoch. Hypothesis cuts that history into fetch answers at
random points (the log reaches a broker in chunks of any size); every chunk carries
the controller's high watermark, the end of the history, as a real answer does. The
logs and leader-epoch caches after the replay must be the same as applying the final
image at once, which is what Kafka's broker does with its first image. Before the fix
the broker became leader at each intermediate epoch it once held and wrote those
epochs into its cache (the cache then ends ``[(0, 0), (2, 3)]`` where it should be
``[(0, 0)]``).

Real segment logs in a temporary folder; no sockets.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from broker_harness import BrokerHarness, metadata_answer, register_brokers
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.broker.metadata_follower import MetadataApplier, local_changes_between
from raftka.broker.replication.manager import ReplicaManager
from raftka.common.record import Record, build_batch
from raftka.metadata.image import MetadataImage
from raftka.metadata.metadata_records import (
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
)

TOPIC_ID = str(uuid.uuid4())
BROKERS = (1, 2, 3)


def _manager(root: Path) -> ReplicaManager:
    manager = BrokerHarness(root).manager

    async def no_alter(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("no ISR change is expected while replaying")

    manager.alter_partition = no_alter
    return manager


def _setup_records(first_leader: int) -> list[MetadataRecord]:
    return [
        *register_brokers(BROKERS),
        TopicRecord(name="t", topic_id=TOPIC_ID),
        PartitionRecord(
            partition_id=0, topic_id=TOPIC_ID, replicas=BROKERS, isr=BROKERS, leader=first_leader
        ),
    ]


def _history(first_leader: int, leaders: list[int]) -> list[list[MetadataRecord]]:
    """One payload per controller command: the set-up, then one leader change each."""
    payloads: list[list[MetadataRecord]] = [_setup_records(first_leader)]
    for leader in leaders:
        payloads.append([PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=leader)])
    return payloads


def _answer(payloads: list[list[MetadataRecord]], start: int, end: int) -> dict[str, Any]:
    """The payloads from ``start`` to ``end`` as one answer, under the controller's HW."""
    return metadata_answer(payloads[start:end], start, high_watermark=len(payloads))


_TEMPLATE: list[Path] = []


def _crashed_broker() -> Path:
    """A log folder as broker 1 left it: leader of t-0 at epoch 0, three records."""
    if not _TEMPLATE:
        root = Path(tempfile.mkdtemp(prefix="raftka-startup-template-"))

        async def build() -> None:
            manager = _manager(root)
            applier = MetadataApplier(1)
            for image, changes in applier.apply_answer(_answer(_history(1, []), 0, 1)):
                manager.apply_metadata(image, changes)
            batch = build_batch(
                [Record(v, timestamp_ms=1_000) for v in (b"a", b"b", b"c")],
                partition_leader_epoch=0,
            )
            (result,) = await manager.produce(acks=1, timeout_ms=1_000, entries=[("t", 0, batch)])
            assert result.error is None, result
            await manager.close()

        asyncio.run(build())
        _TEMPLATE.append(root)
    return _TEMPLATE[0]


def _state(manager: ReplicaManager) -> tuple[object, ...]:
    p = manager.partitions[("t", 0)]
    return (
        p.log.leader_epoch_cache.entries(),
        p.log.log_end_offset,
        p.state.leader_epoch,
        p.replica.is_leader,
    )


def _replay_in_chunks(root: Path, payloads: list[list[MetadataRecord]], cuts: list[int]) -> Any:
    async def run() -> tuple[object, ...]:
        manager = _manager(root)
        applier = MetadataApplier(1, catch_up_first=True)
        bounds = [0, *sorted(set(cuts)), len(payloads)]
        updates = 0
        for start, end in itertools.pairwise(bounds):
            if start == end:
                continue
            for image, changes in applier.apply_answer(_answer(payloads, start, end)):
                manager.apply_metadata(image, changes)
                updates += 1
        assert updates == 1, f"{updates} updates before catching up; expected the first image"
        state = _state(manager)
        await manager.close()
        return state

    return asyncio.run(run())


def _replay_at_once(root: Path, payloads: list[list[MetadataRecord]]) -> Any:
    async def run() -> tuple[object, ...]:
        manager = _manager(root)
        applier = MetadataApplier(1)
        for _update in applier.apply_answer(_answer(payloads, 0, len(payloads))):
            pass  # only the final image counts here
        image = applier.image
        manager.apply_metadata(image, local_changes_between(MetadataImage.EMPTY, image, 1))
        state = _state(manager)
        await manager.close()
        return state

    return asyncio.run(run())


@settings(max_examples=40, deadline=None)
@given(
    first_leader=st.sampled_from(BROKERS),
    leaders=st.lists(st.sampled_from(BROKERS), max_size=6),
    cuts=st.lists(st.integers(min_value=1, max_value=7), max_size=4),
)
def test_start_up_replay_in_any_chunks_equals_the_final_image_at_once(
    first_leader: int, leaders: list[int], cuts: list[int]
) -> None:
    payloads = _history(first_leader, leaders)
    cuts = [c for c in cuts if c < len(payloads)]
    work = Path(tempfile.mkdtemp(prefix="raftka-startup-"))
    try:
        chunked, at_once = work / "chunked", work / "at_once"
        shutil.copytree(_crashed_broker(), chunked)
        shutil.copytree(_crashed_broker(), at_once)
        expected = _replay_at_once(at_once, payloads)
        assert _replay_in_chunks(chunked, payloads, cuts) == expected
        # The final image's leader epoch is the number of leader changes.
        cache, _leo, epoch, leads = expected
        assert epoch == len(leaders) and leads == ((leaders or [first_leader])[-1] == 1)
        assert all(e == 0 or (e == epoch and leads) for e, _ in cache), cache
    finally:
        shutil.rmtree(work, ignore_errors=True)
