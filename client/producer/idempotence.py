"""The idempotent producer's identity and sequence numbers (Kafka's TransactionManager,
idempotence part only).

Theory of operation
-------------------
With ``enable_idempotence`` the producer asks a broker for a producer id
(``POST /v1/init-producer-id``) before it sends anything, and stamps every batch with
that id, its epoch and the per-partition sequence number of the batch's first record.
A batch keeps the sequence it got on its first send for every retry, so a broker that
already appended it recognises the retry and answers with the original offsets
instead of appending it twice.

Sequences are assigned when a batch is first drained, in partition order; together with
one request in flight per partition (up to 5 batches on a first attempt, a retried
batch alone) and retries going back to the head of their queue (see :mod:`.sender`),
the numbers a broker sees per partition are contiguous.

A batch that *fails* after it got a sequence (its retries or delivery timeout ran out,
or the broker refused it with OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH or
UNKNOWN_PRODUCER_ID) leaves a hole the broker would refuse every later batch for. The
producer then *resets*: it fails that batch's future with the error (never re-numbers
it silently), lets every other batch that already has a sequence finish (acknowledged
or failed: re-numbering one whose outcome is unknown could write it twice), then bumps
its epoch (a new producer id once the epoch would pass 32767) and numbers every
partition from 0 again, which a broker accepts for a newer epoch. This is the
client-side epoch bump of KIP-360.

Pure: no I/O, no clock. The sender owns one instance and calls it from its task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from raftka.client.structs import TopicPartition

__all__ = ["EPOCH_MAX", "NO_PRODUCER_ID", "SEQUENCE_MAX", "IdempotenceState"]

NO_PRODUCER_ID: Final = -1
SEQUENCE_MAX: Final = 2**31 - 1  # the next sequence after it is 0, as in Kafka
EPOCH_MAX: Final = 2**15 - 1  # a short on the wire


def _advance(sequence: int, count: int) -> int:
    return (sequence + count) % (SEQUENCE_MAX + 1)


@dataclass(slots=True)
class IdempotenceState:
    """The producer id, epoch and next sequence per partition (see the module docstring)."""

    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    #: Why the producer must reset before it numbers another batch (None: it need not).
    reset_reason: str | None = None
    #: Batches numbered under the current identity and not yet acknowledged or failed.
    unresolved: int = 0
    _next_sequence: dict[TopicPartition, int] = field(default_factory=dict)

    @property
    def has_identity(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    def set_identity(self, producer_id: int, producer_epoch: int) -> None:
        """The answer of InitProducerId: start numbering every partition at 0."""
        assert producer_id >= 0 and 0 <= producer_epoch <= EPOCH_MAX, (producer_id, producer_epoch)
        assert self.unresolved == 0, "a new identity while numbered batches are pending"
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self._next_sequence.clear()
        self.reset_reason = None

    def can_number(self) -> bool:
        """True if a batch without a sequence may get one now."""
        return self.has_identity and self.reset_reason is None

    def number(self, tp: TopicPartition, record_count: int) -> int:
        """The base sequence for a new batch of ``record_count`` records on ``tp``."""
        assert self.can_number() and record_count > 0
        base = self._next_sequence.get(tp, 0)
        self._next_sequence[tp] = _advance(base, record_count)
        self.unresolved += 1
        return base

    def resolved(self) -> None:
        """A numbered batch of the current identity was acknowledged or failed."""
        assert self.unresolved > 0
        self.unresolved -= 1

    def request_reset(self, reason: str) -> None:
        """A numbered batch failed: reset once the pending numbered batches resolve."""
        if self.reset_reason is None:
            self.reset_reason = reason

    def ready_to_reset(self) -> bool:
        return self.reset_reason is not None and self.unresolved == 0

    def bump_epoch(self) -> bool:
        """Reset under the next epoch; False when the epoch is exhausted and a new
        producer id is needed (then call :meth:`forget`)."""
        assert self.ready_to_reset()
        if self.producer_epoch >= EPOCH_MAX:
            return False
        self.set_identity(self.producer_id, self.producer_epoch + 1)
        return True

    def forget(self) -> None:
        """Drop the identity: the next batch waits for a new InitProducerId."""
        assert self.unresolved == 0
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = -1
        self._next_sequence.clear()
        self.reset_reason = None
