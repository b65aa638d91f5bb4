"""Unit tests for producer-state snapshots (raftka.broker.producer_state_snapshot).

Round trip: a leader's state encoded and decoded gives equal entries and the same
classification of retries. Corruption: every single-byte flip and every truncation of a
snapshot raises CorruptMessageError (never another exception, never a wrong load).
File names: Kafka's 20-digit ``<offset>.snapshot``, the choice of the newest at or
below a recovery point, and which to delete after truncation.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from producer_state_helpers import producer_batch

from raftka.broker.producer_state import (
    SEQUENCE_MAX,
    ProducerBatch,
    ProducerStateEntry,
    ProducerStateManager,
)
from raftka.broker.producer_state_snapshot import (
    decode_snapshot,
    encode_snapshot,
    load_newest,
    newest_snapshot,
    snapshot_file_name,
    snapshot_offset,
    snapshots_to_delete,
    snapshots_to_try,
)
from raftka.common.errors import CorruptMessageError


def _b(pid: int, seq: int, *, count: int = 1, epoch: int = 0, ts: int = 5) -> ProducerBatch:
    return producer_batch(pid, seq, count=count, epoch=epoch, ts=ts, transactional=pid == 3)


def _leader_state() -> tuple[ProducerStateManager, list[ProducerBatch], int]:
    """Three producers: one with a full window, one across the sequence wrap, one
    transactional-flagged with a single batch."""
    manager = ProducerStateManager()
    sent = [
        *[_b(1, 2 * i, count=2, ts=100 + i) for i in range(8)],
        _b(2, SEQUENCE_MAX - 1, count=4, epoch=7),
        _b(2, 2, epoch=7),
        _b(3, 0, count=3),
    ]
    offset = 0
    for b in sent:
        manager.update(b, first_offset=offset, last_offset=offset + b.last_offset_delta)
        offset += b.last_offset_delta + 1
    return manager, sent, offset


def test_round_trip_keeps_the_window_and_the_classifications() -> None:
    """encode -> decode gives equal entries; a manager loaded from them answers every
    retry (in and out of the window) and the next batch exactly as the original."""
    manager, sent, end = _leader_state()
    data = encode_snapshot(manager.entries.values(), offset=end)
    loaded = ProducerStateManager()
    loaded.load_entries(decode_snapshot(data, offset=end))
    assert loaded.entries == manager.entries
    probes = [*sent, _b(1, 16), _b(2, 3, epoch=7), _b(2, 0, epoch=8), _b(3, 9)]
    for b in probes:
        assert loaded.validate_and_prepare(b) == manager.validate_and_prepare(b)
    assert encode_snapshot(loaded.entries.values(), offset=end) == data


def test_empty_state_and_placeholders_round_trip() -> None:
    """No producers encodes to the 18-byte header; an entry with no retained batch and
    transaction placeholders set survives too."""
    assert decode_snapshot(encode_snapshot([], offset=0)) == []
    assert len(encode_snapshot([], offset=0)) == 18
    entry = ProducerStateEntry(
        producer_id=4,
        producer_epoch=1,
        batches=(),
        last_timestamp=9,
        coordinator_epoch=3,
        current_txn_first_offset=11,
    )
    assert decode_snapshot(encode_snapshot([entry], offset=20)) == [entry]


def test_every_byte_flip_and_truncation_is_a_corrupt_message() -> None:
    """Flip each bit-pattern 0xFF into every byte position and cut the snapshot at every
    length: decode raises CorruptMessageError each time, nothing else."""
    manager, _, end = _leader_state()
    data = encode_snapshot(manager.entries.values(), offset=end)
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0xFF
        with pytest.raises(CorruptMessageError):
            decode_snapshot(bytes(flipped))
    for n in range(len(data)):
        with pytest.raises(CorruptMessageError):
            decode_snapshot(data[:n])
    with pytest.raises(CorruptMessageError, match="trailing"):
        _decode_with_valid_crc(data[6:] + b"\x00")


def _decode_with_valid_crc(body: bytes) -> None:
    """Decode ``body`` under a correct CRC, to reach the checks behind the CRC."""
    decode_snapshot(struct.pack(">hI", 2, crc32c.crc32c(body)) + body)


def test_inconsistent_content_behind_a_valid_crc_is_rejected() -> None:
    """A snapshot written by a buggy or foreign writer passes the CRC but not the
    structure checks: wrong offset in the name, duplicate producer, a batch above the
    snapshot offset, a huge producer count, a last batch disagreeing with the window."""
    manager, _, end = _leader_state()
    data = encode_snapshot(manager.entries.values(), offset=end)
    with pytest.raises(CorruptMessageError, match="name says"):
        decode_snapshot(data, offset=end + 1)
    body = data[6:]
    with pytest.raises(CorruptMessageError, match="claims"):
        _decode_with_valid_crc(struct.pack(">qi", end, 2**31 - 1) + body[12:])
    # The snapshot offset lowered below the retained batches.
    with pytest.raises(CorruptMessageError, match="inconsistent batch"):
        _decode_with_valid_crc(struct.pack(">q", 1) + body[8:])
    entry = manager.entries[3]
    one = encode_snapshot([entry], offset=end)[6:]
    count_one_entry = one[12:]
    with pytest.raises(CorruptMessageError, match="twice"):
        _decode_with_valid_crc(struct.pack(">qi", end, 2) + count_one_entry * 2)
    # last_sequence field (after pid int64 + epoch int16) no longer matches the window.
    broken = bytearray(one)
    struct.pack_into(">i", broken, 12 + 10, 1234)
    with pytest.raises(CorruptMessageError, match="disagrees"):
        _decode_with_valid_crc(bytes(broken))
    with pytest.raises(CorruptMessageError, match="version"):
        decode_snapshot(struct.pack(">h", 3) + data[2:])


def test_file_names_choice_and_deletion() -> None:
    """Names are 20-digit offsets; the newest at or below the recovery point is chosen,
    foreign names ignored; truncation deletes those above the new log end and retention
    those below the log start."""
    assert snapshot_file_name(1234) == "00000000000000001234.snapshot"
    assert snapshot_offset("00000000000000001234.snapshot") == 1234
    for bad in ("1234.snapshot", "00000000000000001234.snapshot.deleted", "x.log"):
        assert snapshot_offset(bad) is None
    names = [snapshot_file_name(o) for o in (30, 0, 100, 70)] + ["junk.snapshot"]
    assert newest_snapshot(names, offset_max=99) == snapshot_file_name(70)
    assert newest_snapshot(names, offset_max=100) == snapshot_file_name(100)
    assert newest_snapshot(names[1:2], offset_max=5) == snapshot_file_name(0)
    assert newest_snapshot(names, offset_max=-1) is None
    assert snapshots_to_try(names, offset_max=70) == [snapshot_file_name(o) for o in (70, 30, 0)]
    assert snapshots_to_delete(names, log_start_offset=10, log_end_offset=70) == [
        snapshot_file_name(0),
        snapshot_file_name(100),
    ]


def test_load_newest_falls_back_past_a_corrupt_file() -> None:
    """The newest file is corrupt: the next older valid one is loaded; all corrupt: None
    (the caller rebuilds from the log start)."""
    manager, _, end = _leader_state()
    good = encode_snapshot(manager.entries.values(), offset=end)
    newer = bytearray(encode_snapshot(manager.entries.values(), offset=end + 5))
    newer[-1] ^= 1
    files = [(snapshot_file_name(end), good), (snapshot_file_name(end + 5), bytes(newer))]
    loaded = load_newest(files, offset_max=end + 5)
    assert loaded is not None
    assert loaded[0] == end
    assert {e.producer_id: e for e in loaded[1]} == manager.entries
    assert load_newest(files[1:], offset_max=end + 5) is None
    # A good snapshot whose name lies about its offset is skipped too.
    assert load_newest([(snapshot_file_name(end + 1), good)], offset_max=end + 1) is None
