"""``raftka transactions``: list, describe, abort and find hanging transactions (like
kafka-transactions.sh).

* ``list [--state S]``: every transactional id the live brokers coordinate, with its
  producer id, state and coordinator (``--state`` repeatable, Kafka's state names;
  an unknown one is INVALID_REQUEST). A broker that does not answer is named on stderr.
* ``describe --transactional-id ID``: the coordinator's view (state, producer id and
  epoch, timeout, start time, partitions).
* ``abort --transactional-id ID``: abort the id's ongoing transaction through its
  coordinator (EndTxn(abort) with the producer id and epoch it describes; no
  InitProducerId). ``abort --topic T --partition P --producer-id ID --producer-epoch E
  --coordinator-epoch C``: Kafka's abort of a *hanging* transaction, an ABORT marker
  written at the partition's leader (WriteTxnMarkers); ``find-hanging`` prints these
  values.
* ``find-hanging --broker-id N``: open transactions on the partitions broker N leads
  that no coordinator will finish (see ``AsyncTransactionAdmin.find_hanging``).
  ``--max-transaction-timeout`` is in minutes, Kafka's flag (default 15).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import click

from raftka.client.cli._common import (
    api_timeout_option,
    bootstrap_option,
    check_name,
    command_admin,
    one_line_errors,
)
from raftka.client.transaction_admin import (
    DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
    TransactionAdmin,
)
from raftka.common.structs import TopicPartition

__all__ = ["transactions_command"]


@contextlib.contextmanager
def _admin(bootstrap_server: str, api_timeout_ms: int) -> Iterator[TransactionAdmin]:
    admin = command_admin(TransactionAdmin, bootstrap_server, api_timeout_ms)
    try:
        yield admin
    finally:
        admin.close()


def _time(ms: int) -> str:
    if ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


@click.group("transactions")
def transactions_command() -> None:
    """List, describe, abort and find hanging transactions."""


@transactions_command.command("list")
@click.option("--state", "states", multiple=True, help="Only this state (repeatable).")
@bootstrap_option
@api_timeout_option
def list_command(states: tuple[str, ...], bootstrap_server: str, api_timeout_ms: int) -> None:
    """Every transactional id, with its producer id, state and coordinator."""
    with one_line_errors(), _admin(bootstrap_server, api_timeout_ms) as admin:
        listed, errors = admin.list_transactions_from(states=states)
    for broker_id, error in sorted(errors.items()):
        why = f"its transactions are not listed: {error}"
        click.echo(f"warning: broker {broker_id} did not answer, {why}", err=True)
    click.echo("TRANSACTIONAL-ID\tPRODUCER-ID\tSTATE\tCOORDINATOR")
    for t in listed:
        click.echo(f"{t.transactional_id}\t{t.producer_id}\t{t.state}\t{t.coordinator_id}")


@transactions_command.command("describe")
@click.option("--transactional-id", required=True, help="The transactional id.")
@bootstrap_option
@api_timeout_option
def describe_command(transactional_id: str, bootstrap_server: str, api_timeout_ms: int) -> None:
    """The coordinator's view of --transactional-id."""
    with one_line_errors(), _admin(bootstrap_server, api_timeout_ms) as admin:
        d = admin.describe_transaction(transactional_id)
    click.echo(
        "COORDINATOR\tTRANSACTIONAL-ID\tPRODUCER-ID\tPRODUCER-EPOCH\tSTATE\t"
        "TIMEOUT-MS\tSTART-TIME\tPARTITIONS"
    )
    partitions = ",".join(f"{tp.topic}-{tp.partition}" for tp in d.partitions) or "-"
    click.echo(
        f"{d.coordinator_id}\t{d.transactional_id}\t{d.producer_id}\t{d.producer_epoch}\t"
        f"{d.state}\t{d.transaction_timeout_ms}\t{_time(d.transaction_start_time_ms)}\t"
        f"{partitions}"
    )


@transactions_command.command("abort")
@click.option("--transactional-id", help="Abort this id's ongoing transaction.")
@click.option("--topic", help="Hanging transaction: its partition's topic.")
@click.option("--partition", type=click.IntRange(min=0), help="Hanging transaction: partition.")
@click.option("--producer-id", type=click.IntRange(min=0), help="Hanging transaction: producer.")
@click.option(
    "--producer-epoch", type=click.IntRange(0, 32767), help="Hanging transaction: its epoch."
)
@click.option(
    "--coordinator-epoch",
    type=click.IntRange(min=0),
    help="Hanging transaction: the coordinator epoch of the marker.",
)
@bootstrap_option
@api_timeout_option
def abort_command(
    *,
    transactional_id: str | None,
    topic: str | None,
    partition: int | None,
    producer_id: int | None,
    producer_epoch: int | None,
    coordinator_epoch: int | None,
    bootstrap_server: str,
    api_timeout_ms: int,
) -> None:
    """Abort --transactional-id's ongoing transaction, or a hanging transaction given
    --topic --partition --producer-id --producer-epoch --coordinator-epoch."""
    marker = {
        "--topic": topic,
        "--partition": partition,
        "--producer-id": producer_id,
        "--producer-epoch": producer_epoch,
        "--coordinator-epoch": coordinator_epoch,
    }
    given = [name for name, value in marker.items() if value is not None]
    if transactional_id is not None:
        if given:
            raise click.UsageError(f"--transactional-id cannot go with {', '.join(given)}")
        with one_line_errors(), _admin(bootstrap_server, api_timeout_ms) as admin:
            after = admin.abort_ongoing(transactional_id)
        click.echo(
            f"Aborted the ongoing transaction of {transactional_id} "
            f"(now {after.state}, producer id {after.producer_id} epoch {after.producer_epoch})."
        )
        return
    missing = [name for name, value in marker.items() if value is None]
    if missing:
        raise click.UsageError(
            "give --transactional-id, or all of --topic --partition --producer-id "
            f"--producer-epoch --coordinator-epoch (missing: {', '.join(missing)})"
        )
    assert topic is not None and partition is not None and producer_id is not None
    assert producer_epoch is not None and coordinator_epoch is not None
    with one_line_errors():
        check_name("topic", topic)
        with _admin(bootstrap_server, api_timeout_ms) as admin:
            admin.abort_marker(
                TopicPartition(topic, partition),
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch,
            )
    click.echo(
        f"Wrote an ABORT marker for producer {producer_id} (epoch {producer_epoch}) "
        f"to {topic}-{partition}."
    )


@transactions_command.command("find-hanging")
@click.option("--broker-id", type=click.IntRange(min=0), required=True, help="The broker.")
@click.option(
    "--max-transaction-timeout",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MS // 60_000,
    show_default=True,
    help="Minutes (transaction.max.timeout.ms): an older open transaction is hanging.",
)
@bootstrap_option
@api_timeout_option
def find_hanging_command(
    broker_id: int, max_transaction_timeout: int, bootstrap_server: str, api_timeout_ms: int
) -> None:
    """Open transactions on the partitions --broker-id leads that no coordinator will
    finish, with what ``abort`` needs to abort each."""
    with one_line_errors(), _admin(bootstrap_server, api_timeout_ms) as admin:
        hanging = admin.find_hanging(
            broker_id=broker_id,
            max_transaction_timeout_ms=max_transaction_timeout * 60_000,
            now_ms=int(time.time() * 1000),
        )
    click.echo(
        "TOPIC\tPARTITION\tPRODUCER-ID\tPRODUCER-EPOCH\tCOORDINATOR-EPOCH\t"
        "START-OFFSET\tLAST-TIMESTAMP\tTRANSACTIONAL-ID\tREASON"
    )
    for h in hanging:
        p = h.producer
        click.echo(
            f"{h.partition.topic}\t{h.partition.partition}\t{p.producer_id}\t"
            f"{p.producer_epoch}\t{p.coordinator_epoch}\t{p.current_txn_start_offset}\t"
            f"{_time(p.last_timestamp)}\t{h.transactional_id or '-'}\t{h.reason}"
        )
