"""Producer batches and their log headers, for the producer-state tests (unit, snapshot
and the property model). Test modules cannot import each other (``--import-mode=importlib``),
so what they share lives here, on pytest's ``pythonpath``."""

from __future__ import annotations

from raftka.broker.producer_state import ProducerBatch
from raftka.common.record.header import BatchHeader


def producer_batch(
    pid: int,
    seq: int,
    *,
    count: int = 1,
    epoch: int = 0,
    ts: int = 1_000,
    transactional: bool = False,
) -> ProducerBatch:
    """What the producer-state manager sees of a batch of ``count`` records from
    producer ``pid`` at ``epoch``, its first sequence ``seq``, its max timestamp ``ts``."""
    return ProducerBatch(
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        last_offset_delta=count - 1,
        max_timestamp=ts,
        is_transactional=transactional,
    )


def header_of(b: ProducerBatch, first_offset: int) -> BatchHeader:
    """The header a log would hold for ``b`` appended at ``first_offset``."""
    return BatchHeader(
        base_offset=first_offset,
        batch_length=49,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=0x10 if b.is_transactional else 0,
        last_offset_delta=b.last_offset_delta,
        base_timestamp=b.max_timestamp,
        max_timestamp=b.max_timestamp,
        producer_id=b.producer_id,
        producer_epoch=b.producer_epoch,
        base_sequence=b.base_sequence,
        records_count=b.last_offset_delta + 1,
    )
