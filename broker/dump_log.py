"""``raftka dump-log`` as the CLI runs it: storage's segment and ``.txnindex`` dumps
(:mod:`raftka.storage.dump`) plus producer state snapshots (``*.snapshot``), whose
format is the broker's producer state (:mod:`raftka.broker.producer_state_snapshot`)."""

from __future__ import annotations

from pathlib import Path

import click
import orjson

from raftka.broker.producer_state_snapshot import decode_snapshot, snapshot_offset
from raftka.common.errors import KafkaError
from raftka.storage.dump import make_dump_log_command

__all__ = ["dump_log_command", "dump_producer_snapshot"]


def dump_producer_snapshot(path: Path, as_json: bool) -> bool:
    """Print a producer state snapshot (``*.snapshot``): each producer, its open
    transaction's first offset, and the last stable offset as of the snapshot (the
    first offset of the oldest open transaction, else the snapshot's offset: the LSO
    can be no higher there). False if it could not be read."""
    offset = snapshot_offset(path.name)
    if offset is None:
        click.echo(f"error: {path}: not a producer snapshot name (OFFSET.snapshot)", err=True)
        return False
    try:
        entries = decode_snapshot(path.read_bytes(), offset=offset)
    except OSError as exc:
        click.echo(f"error: cannot read {path}: {exc.strerror or exc}", err=True)
        return False
    except KafkaError as exc:
        click.echo(f"error: {path}: {exc.name}: {exc.message}", err=True)
        return False
    open_starts = [e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0]
    lso = min(open_starts) if open_starts else offset
    if as_json:
        for e in entries:
            item = {
                "producer_id": e.producer_id,
                "producer_epoch": e.producer_epoch,
                "last_sequence": e.last_sequence,
                "last_offset": e.last_offset,
                "coordinator_epoch": e.coordinator_epoch,
                "current_txn_first_offset": e.current_txn_first_offset,
            }
            click.echo(orjson.dumps({"file": str(path), "producer": item}).decode())
        summary = {"offset": offset, "open_transactions": len(open_starts), "lso": lso}
        click.echo(orjson.dumps({"file": str(path), "producer_snapshot": summary}).decode())
        return True
    click.echo(f"Dumping {path}")
    for e in entries:
        open_txn = e.current_txn_first_offset if e.current_txn_first_offset >= 0 else "none"
        click.echo(
            f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
            f"lastSequence: {e.last_sequence} lastOffset: {e.last_offset} "
            f"coordinatorEpoch: {e.coordinator_epoch} currentTxnFirstOffset: {open_txn}"
        )
    click.echo(
        f"Snapshot offset: {offset} open transactions: {len(open_starts)} "
        f"last stable offset at the snapshot: {lso}"
    )
    return True


dump_log_command = make_dump_log_command({".snapshot": dump_producer_snapshot})
