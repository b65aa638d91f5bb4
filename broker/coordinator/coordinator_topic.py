"""A coordinator's internal topic on a broker: its creation, placement and leadership.

Both coordinators keep their state in a compacted internal topic whose partition
leaders are the coordinators (``__consumer_offsets`` for groups, ``__transaction_state``
for transactions). What they share is here:

* **Placement.** A key (group id, transactional id) lives in partition
  ``abs(hash(key)) % N`` (:func:`coordinator_partition`); N is the topic's own partition
  count once it exists (placement must never change under a key), else the configured
  one. Any broker answers FindCoordinator from its metadata image.
* **Creation.** The first FindCoordinator that finds no topic asks the active controller
  to create it with the configured replication factor and is answered
  COORDINATOR_NOT_AVAILABLE until it shows up. As in Kafka, the controller refuses a
  factor above the usable brokers, so the topic is not created until enough brokers are
  up (never with fewer replicas for good); the answer then names the setting to lower
  (a one- or two-broker cluster sets it, as Kafka's single-broker config does).
* **Appends** go to our own leader replica with acks=all (:meth:`CoordinatorTopic.append`);
  **loading** reads a partition's log from start to end (:meth:`read_partition`).
* **Leadership.** :meth:`CoordinatorTopic.led_partitions` is the partitions this broker
  leads with their leader epochs (the replica manager's view), which the coordinator
  compares with what it owns after every metadata change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from raftka.broker.coordinator.placement import coordinator_partition
from raftka.broker.lifecycle import ControllerChannel
from raftka.broker.replication.manager import ReplicaManager
from raftka.common.errors import CoordinatorNotAvailableError, KafkaError
from raftka.common.record import Record, build_batch, decode_batches
from raftka.common.time import wall_clock_ms
from raftka.metadata.metadata_records import NO_LEADER

__all__ = ["LOAD_BUFFER_BYTES", "CoordinatorLocation", "CoordinatorTopic", "KeyedRecord"]

log = logging.getLogger(__name__)


#: Bytes read from the log per step while loading a partition (Kafka's
#: offsets.load.buffer.size and transaction.state.log.load.buffer.size default).
LOAD_BUFFER_BYTES: Final = 5 * 1024 * 1024

#: A data record of the topic as loading reads it: (key, value); value None: tombstone.
KeyedRecord = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class CoordinatorLocation:
    """FindCoordinator's answer: an error, or the coordinator broker."""

    error: KafkaError | None
    node_id: int = -1
    host: str = ""
    port: int = -1


class CoordinatorTopic:
    """One internal topic as its coordinator sees it (see the module docstring)."""

    def __init__(
        self,
        *,
        name: str,
        num_partitions: int,
        replication_factor: int,
        replication_setting: str,
        configs: Mapping[str, str],
        replicas: ReplicaManager,
        channel: Callable[[], ControllerChannel | None],
        request_timeout_ms: int,
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
        min_isr: int | None = None,
    ) -> None:
        self.name = name
        self._num_partitions = num_partitions
        self._replication_factor = replication_factor
        self._configs = dict(configs)
        self._min_isr = min_isr
        self._replicas = replicas
        self._channel = channel
        self._request_timeout_ms = request_timeout_ms
        self._spawn = spawn
        self._replication_setting = replication_setting
        self._creating: asyncio.Task[None] | None = None
        #: Why the controller last refused to create the topic ("" if it did not).
        self._refusal = ""

    def num_partitions(self) -> int:
        """The topic's own partition count once it exists, else the configured one."""
        topic = self._replicas.image.topics.topic_by_name(self.name)
        if topic is not None and topic.partitions:
            return len(topic.partitions)
        return self._num_partitions

    def partition_for(self, key: str) -> int:
        return coordinator_partition(key, self.num_partitions())

    def locate(self, key: str, what: str) -> CoordinatorLocation:
        """The leader of ``key``'s partition (``what`` names the key in errors); asks
        for the topic's creation when it does not exist yet."""
        image = self._replicas.image
        topic = image.topics.topic_by_name(self.name)
        if topic is None or not topic.partitions:
            self.ensure_created()
            why = f"{self.name} is being created"
            if self._refusal:
                why = (
                    f"{self.name} cannot be created yet ({self._replication_setting}="
                    f"{self._replication_factor}): {self._refusal}"
                )
            return CoordinatorLocation(CoordinatorNotAvailableError(why))
        reg = topic.partitions.get(self.partition_for(key))
        broker = (
            None if reg is None or reg.leader == NO_LEADER else image.cluster.broker(reg.leader)
        )
        if reg is None or broker is None or not broker.endpoints:
            return CoordinatorLocation(
                CoordinatorNotAvailableError(f"no leader for the partition of {what} {key!r}")
            )
        endpoint = broker.endpoint("PLAINTEXT") or broker.endpoints[0]
        return CoordinatorLocation(None, reg.leader, endpoint.host, endpoint.port)

    def led_partitions(self) -> dict[int, int]:
        """Partition -> leader epoch of the partitions this broker leads."""
        return {
            index: p.state.leader_epoch
            for (topic, index), p in self._replicas.partitions.items()
            if topic == self.name and p.state.is_leader
        }

    async def append(
        self, partition: int, records: Sequence[KeyedRecord], *, timeout_ms: int
    ) -> type[KafkaError] | None:
        """Append ``records`` as one batch to our leader replica of ``partition`` with
        acks=all; the append's error, if any. The produce call appends before its first
        await, so appends start in the order of the calls."""
        now = wall_clock_ms()
        batch = build_batch([Record(value, key, now) for key, value in records])
        try:
            (result,) = await self._replicas.produce(
                acks=-1, timeout_ms=timeout_ms, entries=[(self.name, partition, batch)]
            )
        except KafkaError as e:
            return type(e)
        return None if result.error is None else type(result.error)

    async def read_partition(
        self, partition: int, owned: Callable[[], bool]
    ) -> AsyncIterator[list[KeyedRecord]]:
        """The keyed data records of ``partition`` from its log start to its log end
        (ours: we are its leader), a step of at most LOAD_BUFFER_BYTES at a time; stops
        early once ``owned()`` is false (unloaded meanwhile). Steps yield to the loop, so
        a large partition does not stall the broker."""
        p = self._replicas.partitions.get((self.name, partition))
        if p is None:
            return
        end = p.log.log_end_offset
        offset = p.log.log_start_offset
        while offset < end:
            # The log cleaner may hold this log (broker/log_cleaning.py): wait for it to
            # give it back before every read (each step yields to the loop).
            await self._replicas.wait_clean_ended(p.tp)
            if not owned():
                return
            current = self._replicas.partitions.get(p.tp)
            if current is None:
                return  # stopped meanwhile; the coordinator unloads it
            p = current  # reopened after a cleaner error: the same log, a new object
            data = p.log.read(offset, LOAD_BUFFER_BYTES, max_offset=end, min_one_batch=True)
            batches = list(decode_batches(data))
            if not batches:
                return
            step: list[KeyedRecord] = []
            for batch in batches:
                offset = batch.header.next_offset
                if batch.header.is_control:
                    continue
                step.extend((r.key, r.value) for r in batch.records if r.key is not None)
            yield step
            await asyncio.sleep(0)  # let requests in between steps

    def ensure_created(self) -> None:
        if self._creating is None or self._creating.done():
            self._creating = self._spawn(self._create())

    async def _create(self) -> None:
        channel = self._channel()
        if channel is None:
            return
        replication = self._replication_factor
        configs = dict(self._configs)
        if self._min_isr is not None:
            # At most the replication factor: the broker's config refuses more.
            configs["min.insync.replicas"] = str(self._min_isr)
        body = {
            "topics": [
                {
                    "name": self.name,
                    "num_partitions": self._num_partitions,
                    "replication_factor": replication,
                    "configs": configs,
                }
            ]
        }
        fields = {"topic": self.name}
        try:
            answer = await channel.post("/v1/topics", body, timeout_ms=self._request_timeout_ms)
        except KafkaError as e:
            log.warning(
                "cannot create a coordinator topic", extra={"fields": {**fields, "error": str(e)}}
            )
            return
        for item in answer.get("topics", []):
            error = item.get("error") if isinstance(item, dict) else None
            if error and error.get("error") == "TOPIC_ALREADY_EXISTS":
                # Created by another broker, or by this one and not yet in its image
                # (the image is published once the new logs are open): nothing to say.
                return
            if error:
                refusal = f"{error.get('error')}: {error.get('message', '')}".rstrip(": ")
                if refusal != self._refusal:
                    # Once per distinct refusal: FindCoordinator retries ask again and
                    # again while too few brokers are up.
                    log.warning(
                        "coordinator topic creation refused",
                        extra={
                            "fields": {
                                **fields,
                                "error": error,
                                self._replication_setting: replication,
                            }
                        },
                    )
                self._refusal = refusal
                return
        self._refusal = ""
        log.info(
            "created a coordinator topic",
            extra={
                "fields": {
                    **fields,
                    "partitions": self._num_partitions,
                    "replication_factor": replication,
                }
            },
        )
