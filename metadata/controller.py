"""The pure core of the QuorumController: the commands the active controller runs.

Theory of operation
-------------------
Every command reads a :class:`MetadataImage` (the active controller's latest image,
including the records of earlier commands that are not committed yet) and returns a
:class:`ControllerResult`: the records to append to the metadata log and the response
to send once they commit. A command never changes the image; state changes only when
the records are replayed (by :class:`MetadataDelta`, identically on every node). A
command that fails raises a Kafka error and returns no records; commands over many
items (CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs) answer
per item instead, as Kafka does, so one bad topic does not fail the others.

Inside a command, records are gathered in a :class:`CommandBatch` that replays each one
into a delta as it is added, so a later step sees an earlier one (the second topic of a
request sees the first; fencing the second stale broker sees the first fenced). A record
that does not replay is a bug here, and crashes the command rather than reaching the log.

The module map: the command types and the batch are ``controller_api``; the topic,
partition and config commands (Kafka's ReplicationControlManager topic half and
ConfigurationControlManager) are ``topic_control.TopicControl``, which QuorumController
extends (import the command types from ``controller_api``); this module keeps broker
sessions, fencing, controlled shutdown, leader elections, AlterPartition,
preferred-leader rebalance and producer-id blocks (Kafka's ClusterControlManager,
BrokerHeartbeatManager and the rest of ReplicationControlManager).

:class:`QuorumController` holds the only state that is not in the log, as Kafka's
BrokerHeartbeatManager does: when each broker was last heard from, the metadata offset
it reported, and the offset at which its controlled shutdown was written. It lives on
the active controller only; a new active controller starts with a fresh session for
every registered broker. Time comes in as ``now_ms``, the offset the next record will
get as ``next_offset``, randomness as a seeded ``random.Random``: no clock, no I/O.

Broker states, as Kafka's heartbeat state machine (FENCED, UNFENCED,
CONTROLLED_SHUTDOWN, SHUTDOWN_NOW):

* FENCED -> UNFENCED once a heartbeat reports a metadata offset at or past the broker's
  registration (its broker epoch), unless it asks to stay fenced or to shut down.
* UNFENCED -> CONTROLLED_SHUTDOWN on a heartbeat with ``want_shutdown`` while it leads
  something: its leaderships move to other in-sync replicas and it leaves every ISR it
  can leave (a partition with no other acceptable leader keeps it as leader).
* CONTROLLED_SHUTDOWN -> SHUTDOWN_NOW once every active broker has caught up with the
  controlled-shutdown records; an UNFENCED broker that leads nothing goes there at once.
  SHUTDOWN_NOW fences the broker and answers ``should_shutdown``.
* any -> fenced when its session expires (``expire_sessions``) or it asks to be fenced.

Fencing a broker removes it from every ISR except where it is the last member (the ISR
keeps it and the partition has no leader until it returns, so nothing acknowledged is
lost) and elects new leaders for the partitions it led (see ``election.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from raftka.common.errors import (
    BrokerIdNotRegisteredError,
    DuplicateBrokerRegistrationError,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    KafkaError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    StaleBrokerEpochError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from raftka.metadata.controller_api import (
    AllocateProducerIdsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    CommandBatch,
    ControllerDeadlines,
    ControllerResult,
    ElectLeadersResponse,
    ExpireSessionsResponse,
    PartitionOutcome,
    ReassignmentsResponse,
    RebalanceResponse,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    is_active_broker,
)
from raftka.metadata.election import Election, PartitionChangeBuilder, next_elr
from raftka.metadata.image import (
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicIdPartition,
    TopicImage,
)
from raftka.metadata.metadata_records import (
    FENCE,
    IN_CONTROLLED_SHUTDOWN,
    NO_LEADER,
    NO_LEADER_CHANGE,
    UNFENCE,
    BrokerRegistrationChangeRecord,
    PartitionChangeRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
)
from raftka.metadata.reassignment import completion_record, start_record
from raftka.metadata.topic_config import parse_bool
from raftka.metadata.topic_control import TopicControl
from raftka.server_common.controller_config import PRODUCER_ID_BLOCK_SIZE, ControllerConfig

__all__ = ["REBALANCE_ELECTIONS_MAX", "QuorumController"]

# Preferred-leader elections per rebalance run (Kafka's maxElectionsPerImbalance).
REBALANCE_ELECTIONS_MAX: Final = 1000


# ---------------------------------------------------------------------------------------
# Helpers


def _partitions(image: MetadataImage) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
    """Every partition, by topic name then index (a stable order for records)."""
    for name in sorted(image.topics.by_name):
        topic = image.topics.by_name[name]
        for index in sorted(topic.partitions):
            yield topic, index, topic.partitions[index]


def _unclean_enabled(image: MetadataImage, config: ControllerConfig, topic: str) -> bool:
    """The topic's unclean.leader.election.enable, else the cluster-wide broker default
    in the image, else the controller's static default."""
    key = "unclean.leader.election.enable"
    for value in (
        image.configs.topic_config(topic).get(key),
        image.configs.broker_config(None).get(key),
    ):
        if value is not None:
            parsed = parse_bool(value)
            if parsed is not None:
                return parsed
    return config.unclean_leader_election_enable


def _min_isr(image: MetadataImage, topic: str) -> int:
    """The topic's min.insync.replicas, else the cluster-wide broker default in the
    image, else Kafka's default (1): what the ELR is kept against (see election.py)."""
    key = "min.insync.replicas"
    for value in (
        image.configs.topic_config(topic).get(key),
        image.configs.broker_config(None).get(key),
    ):
        if value is not None and value.strip().isdigit():
            return max(1, int(value))
    return 1


def _election_refusal(
    image: MetadataImage,
    election: Election,
    name: str,
    index: int,
    partition: PartitionRegistration,
) -> KafkaError | None:
    """Why ElectLeaders does not elect ``partition``'s leader, or None if it may."""
    if election is Election.PREFERRED:
        preferred = partition.preferred_leader()
        if partition.leader == preferred:
            return ElectionNotNeededError(f"{name}-{index} is led by its preferred replica")
        if preferred not in partition.isr or not is_active_broker(image, preferred):
            return PreferredLeaderNotAvailableError(
                f"{name}-{index}: the preferred replica {preferred} is not an active ISR member"
            )
        return None
    if partition.has_leader() and is_active_broker(image, partition.leader):
        return ElectionNotNeededError(f"{name}-{index} has a leader")
    return None


def _check_broker_epoch(
    image: MetadataImage, broker_id: int, broker_epoch: int
) -> BrokerRegistration:
    """Kafka's checkBrokerEpoch: STALE_BROKER_EPOCH unless registered with that epoch."""
    broker = image.cluster.broker(broker_id)
    if broker is None:
        raise StaleBrokerEpochError(f"No broker registration found for broker {broker_id}")
    if broker.epoch != broker_epoch:
        raise StaleBrokerEpochError(
            f"Expected broker epoch {broker.epoch} for broker {broker_id}, got {broker_epoch}"
        )
    return broker


# ---------------------------------------------------------------------------------------
# The controller


@dataclass(slots=True)
class _Session:
    """Soft state of one broker (Kafka's BrokerHeartbeatState)."""

    last_contact_ms: int
    metadata_offset: int = -1  # -1 until the broker reports one to this controller
    controlled_shutdown_offset: int | None = None


class QuorumController(TopicControl):
    """The active controller's commands; holds only broker sessions (soft state).

    The topic, partition and config commands (CreateTopics, DeleteTopics,
    CreatePartitions, IncrementalAlterConfigs) are :class:`TopicControl`'s; this class
    adds broker sessions, fencing, elections, AlterPartition and producer ids.

    Not thread-safe: the shell runs every command on one event queue, in order, each
    against the image that includes the records of the commands before it.
    """

    def __init__(self, config: ControllerConfig, image: MetadataImage, now_ms: int) -> None:
        super().__init__(config)
        # A new active controller gives every registered broker a fresh session.
        self._sessions: dict[int, _Session] = {
            broker_id: _Session(now_ms) for broker_id in image.cluster.brokers
        }
        self._last_rebalance_ms = now_ms

    # -- sessions ---------------------------------------------------------------------

    def _session(self, broker_id: int, now_ms: int) -> _Session:
        session = self._sessions.get(broker_id)
        if session is None:
            # Registered through a record this controller did not write: fresh session.
            session = self._sessions[broker_id] = _Session(now_ms)
        return session

    def _has_valid_session(self, broker: BrokerRegistration, now_ms: int) -> bool:
        if broker.fenced:
            return False
        session = self._session(broker.broker_id, now_ms)
        return now_ms <= session.last_contact_ms + self.config.broker_session_timeout_ms

    def last_contact_ms(self, broker_id: int) -> int | None:
        session = self._sessions.get(broker_id)
        return None if session is None else session.last_contact_ms

    # -- broker lifecycle -------------------------------------------------------------

    def register_broker(
        self, image: MetadataImage, request: RegisterBrokerRequest, *, now_ms: int, next_offset: int
    ) -> ControllerResult[RegisterBrokerResponse]:
        """BrokerRegistration. The broker epoch is ``next_offset``, the offset of the
        RegisterBrokerRecord (the first record). The broker starts fenced.

        A registration replaces an older one of the same id unless that one still has a
        live session under a different incarnation id (DUPLICATE_BROKER_REGISTRATION: two
        processes claim one id). The same incarnation registering again (a retry, or a
        restart that kept its id) gets a new epoch; if its old registration was
        unfenced, it also leaves the ISRs and leaderships it held, as on fencing.
        """
        assert next_offset > image.offset, (next_offset, image.offset)
        existing = image.cluster.broker(request.broker_id)
        if (
            existing is not None
            and existing.incarnation_id != request.incarnation_id
            and self._has_valid_session(existing, now_ms)
        ):
            raise DuplicateBrokerRegistrationError(
                f"Another broker is registered with id {request.broker_id} "
                f"(incarnation {existing.incarnation_id}) and its session is still alive"
            )
        try:
            record = RegisterBrokerRecord(
                broker_id=request.broker_id,
                incarnation_id=request.incarnation_id,
                broker_epoch=next_offset,
                endpoints=request.endpoints,
                rack=request.rack,
                fenced=True,
            )
        except InvalidRequestError as e:
            raise InvalidRequestError(f"Invalid broker registration: {e.message}") from None
        batch = CommandBatch(image)
        batch.add(record)
        if existing is not None and not existing.fenced:
            self._leave_partitions(batch, request.broker_id)
        if not request.clean_shutdown:
            self._leave_elrs(batch, request.broker_id)
        self._sessions[request.broker_id] = _Session(now_ms)
        return batch.result(RegisterBrokerResponse(next_offset))

    def heartbeat(
        self,
        image: MetadataImage,
        request: BrokerHeartbeatRequest,
        *,
        now_ms: int,
        next_offset: int,
    ) -> ControllerResult[BrokerHeartbeatResponse]:
        """BrokerHeartbeat: records the contact, and moves the broker through the state
        machine described in the module doc."""
        assert next_offset > image.offset, (next_offset, image.offset)
        broker_id = request.broker_id
        broker = image.cluster.broker(broker_id)
        if broker is None:
            raise BrokerIdNotRegisteredError(f"Broker {broker_id} is not registered")
        if broker.epoch != request.broker_epoch:
            raise StaleBrokerEpochError(
                f"Expected broker epoch {broker.epoch} for broker {broker_id}, "
                f"got {request.broker_epoch}"
            )
        session = self._session(broker_id, now_ms)
        session.last_contact_ms = now_ms
        session.metadata_offset = max(session.metadata_offset, request.current_metadata_offset)
        caught_up = request.current_metadata_offset >= broker.epoch
        batch = CommandBatch(image)
        should_shutdown = False
        if broker.fenced:
            if request.want_shutdown:
                should_shutdown = True
            elif not request.want_fence and caught_up:
                self._unfence(batch, broker)
        elif request.want_fence:
            self._fence(batch, broker)
            should_shutdown = request.want_shutdown
        elif broker.in_controlled_shutdown:
            if session.controlled_shutdown_offset is None:
                # Failover lost the offset; the image holds the records, so its offset
                # is a safe stand-in.
                session.controlled_shutdown_offset = image.offset
            if self._lowest_active_offset(image) >= session.controlled_shutdown_offset:
                self._fence(batch, broker)
                should_shutdown = True
        elif request.want_shutdown:
            if image.topics.partitions_led_by(broker_id):
                batch.add(
                    BrokerRegistrationChangeRecord(
                        broker_id=broker_id,
                        broker_epoch=broker.epoch,
                        in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN,
                    )
                )
                self._leave_partitions(batch, broker_id, controlled=True)
                # Granted once every active broker has replayed these records. A command's
                # records travel as one payload, so all of them commit at next_offset
                # (counting one offset per record would wait for offsets that may never
                # come while the cluster is idle).
                session.controlled_shutdown_offset = next_offset
            else:
                self._fence(batch, broker)
                should_shutdown = True
        after = batch.image.cluster.broker(broker_id)
        assert after is not None
        return batch.result(
            BrokerHeartbeatResponse(
                is_caught_up=caught_up,
                is_fenced=after.fenced,
                in_controlled_shutdown=after.in_controlled_shutdown,
                should_shutdown=should_shutdown,
            )
        )

    def _lowest_active_offset(self, image: MetadataImage) -> float:
        offsets = [
            self._sessions[b.broker_id].metadata_offset if b.broker_id in self._sessions else -1
            for b in image.cluster.live_brokers()
            if not b.in_controlled_shutdown
        ]
        return min(offsets) if offsets else float("inf")

    def expire_sessions(
        self, image: MetadataImage, now_ms: int
    ) -> ControllerResult[ExpireSessionsResponse]:
        """Fence every unfenced broker not heard from for broker.session.timeout.ms."""
        batch = CommandBatch(image)
        fenced: list[int] = []
        for broker in image.cluster.live_brokers():
            if not self._has_valid_session(broker, now_ms):
                current = batch.image.cluster.broker(broker.broker_id)
                assert current is not None
                self._fence(batch, current)
                fenced.append(broker.broker_id)
        return batch.result(ExpireSessionsResponse(tuple(fenced)))

    def _fence(self, batch: CommandBatch, broker: BrokerRegistration) -> None:
        """Kafka's handleBrokerFenced: leave ISRs and leaderships, then the FENCE record."""
        self._leave_partitions(batch, broker.broker_id)
        batch.add(
            BrokerRegistrationChangeRecord(
                broker_id=broker.broker_id, broker_epoch=broker.epoch, fenced=FENCE
            )
        )

    def _unfence(self, batch: CommandBatch, broker: BrokerRegistration) -> None:
        """UNFENCE, then elect leaders for leaderless partitions (the broker may be the
        ISR member they were waiting for, or an unclean candidate)."""
        batch.add(
            BrokerRegistrationChangeRecord(
                broker_id=broker.broker_id, broker_epoch=broker.epoch, fenced=UNFENCE
            )
        )
        self._elect_leaderless(batch)

    def _leave_partitions(
        self, batch: CommandBatch, broker_id: int, *, controlled: bool = False
    ) -> None:
        """Remove ``broker_id`` from every ISR it is in (never emptying one) and move its
        leaderships to acceptable ISR members (or, where the topic allows it, to any
        acceptable replica: unclean election).

        ``controlled`` (entering controlled shutdown): the broker still serves, so a
        partition it leads that no other in-sync replica can take over is left as it is
        until the broker is fenced, and no unclean election happens: a planned shutdown
        must not lose acknowledged records."""
        image = batch.image

        def acceptable(b: int) -> bool:
            return b != broker_id and is_active_broker(image, b)

        for topic, index, partition in _partitions(image):
            if broker_id not in partition.isr:
                continue
            builder = PartitionChangeBuilder(
                partition,
                topic.topic_id,
                index,
                acceptable,
                unclean_election=not controlled
                and _unclean_enabled(image, self.config, topic.name),
                min_isr=_min_isr(image, topic.name),
            ).set_target_isr([b for b in partition.isr if b != broker_id])
            record = builder.build()
            if record is None:
                continue
            if controlled and partition.leader == broker_id and record.leader == NO_LEADER:
                continue
            batch.add(record)

    def _leave_elrs(self, batch: CommandBatch, broker_id: int) -> None:
        """KIP-966: a broker back from an unclean shutdown may have lost records it had
        not fsynced, so it is no longer an eligible leader anywhere (an ISR member it
        still is stays one: Kafka's rule before the ELR, election.py)."""
        for topic, index, partition in _partitions(batch.image):
            if broker_id in partition.eligible_leader_replicas:
                elr = tuple(b for b in partition.eligible_leader_replicas if b != broker_id)
                batch.add(
                    PartitionChangeRecord(
                        partition_id=index, topic_id=topic.topic_id, eligible_leader_replicas=elr
                    )
                )

    # -- topics, partitions, configs (TopicControl's commands) -----------------------

    def _configs_changed(self, batch: CommandBatch, topics: set[str]) -> None:
        # A lower min.insync.replicas (the topic's, or the cluster-wide default) that
        # the ISR now meets lets the leader move its HW again, past what the ELR holds:
        # the ELR goes in the same command, before any broker applies the new value.
        for topic, index, partition in _partitions(batch.image):
            if partition.eligible_leader_replicas:
                elr = next_elr(partition, partition.isr, _min_isr(batch.image, topic.name))
                if elr != partition.eligible_leader_replicas:
                    batch.add(
                        PartitionChangeRecord(
                            partition_id=index,
                            topic_id=topic.topic_id,
                            eligible_leader_replicas=elr,
                        )
                    )
        # Turning unclean.leader.election.enable on acts at once, as in Kafka: the
        # topic's leaderless partitions get a leader from any live replica in the same
        # command, instead of waiting for the next broker to come back.
        self._elect_leaderless(batch, topics)

    def _elect_leaderless(self, batch: CommandBatch, topics: set[str] | None = None) -> None:
        """A leader for each leaderless partition of ``topics`` (None: of every topic)
        that the election rules (with the topic's current unclean setting) allow."""
        image = batch.image
        for topic, index, partition in _partitions(image):
            if partition.leader != NO_LEADER or (topics is not None and topic.name not in topics):
                continue
            builder = PartitionChangeBuilder(
                partition,
                topic.topic_id,
                index,
                lambda b: is_active_broker(image, b),
                unclean_election=_unclean_enabled(image, self.config, topic.name),
                min_isr=_min_isr(image, topic.name),
            )
            record = builder.build()
            if record is not None:
                batch.add(record)

    # -- partitions -------------------------------------------------------------------

    def alter_partition(
        self, image: MetadataImage, request: AlterPartitionRequest
    ) -> ControllerResult[AlterPartitionResponse]:
        """AlterPartition for one partition, validated in Kafka's order (the broker
        epoch first, then ReplicationControlManager's checks). An ISR equal to the
        current one is accepted with no record."""
        _check_broker_epoch(image, request.broker_id, request.broker_epoch)
        topic = image.topics.topic(request.topic_id)
        partition = None if topic is None else topic.partition(request.partition)
        if topic is None or partition is None:
            raise UnknownTopicOrPartitionError(
                f"No partition {request.partition} of topic id {request.topic_id}"
            )
        where = f"{topic.name}-{request.partition}"
        # Epochs ahead of ours: this controller is behind, so likely no longer active.
        if request.leader_epoch > partition.leader_epoch:
            raise NotControllerError(
                f"{where}: leader epoch {request.leader_epoch} is ahead of the "
                f"controller's {partition.leader_epoch}"
            )
        if request.partition_epoch > partition.partition_epoch:
            raise NotControllerError(
                f"{where}: partition epoch {request.partition_epoch} is ahead of the "
                f"controller's {partition.partition_epoch}"
            )
        if request.leader_epoch < partition.leader_epoch:
            raise FencedLeaderEpochError(
                f"{where}: leader epoch {request.leader_epoch} is older than the current "
                f"{partition.leader_epoch}"
            )
        if request.broker_id != partition.leader:
            raise InvalidRequestError(
                f"{where}: broker {request.broker_id} is not the leader "
                f"(the leader is {partition.leader})"
            )
        if request.partition_epoch < partition.partition_epoch:
            raise InvalidUpdateVersionError(
                f"{where}: partition epoch {request.partition_epoch} is older than the "
                f"current {partition.partition_epoch}"
            )
        new_isr = tuple(request.new_isr)
        # As Kafka, a replica outside the assignment makes the ISR malformed
        # (INVALID_REQUEST); INELIGIBLE_REPLICA is for replicas that may not be in sync.
        if len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(partition.replicas):
            raise InvalidRequestError(
                f"{where}: ISR {list(new_isr)} is not a set of replicas {list(partition.replicas)}"
            )
        if partition.leader not in new_isr:
            raise InvalidRequestError(
                f"{where}: ISR {list(new_isr)} does not include the leader {partition.leader}"
            )
        ineligible = []
        for broker_id in new_isr:
            broker = image.cluster.broker(broker_id)
            if broker is None:
                ineligible.append(f"{broker_id} (not registered)")
            elif broker.in_controlled_shutdown:
                ineligible.append(f"{broker_id} (shutting down)")
            elif broker.fenced:
                ineligible.append(f"{broker_id} (fenced)")
        if ineligible:
            raise IneligibleReplicaError(
                f"{where}: ineligible replicas in the new ISR: {', '.join(ineligible)}"
            )
        batch = CommandBatch(image)
        elr = next_elr(partition, new_isr, _min_isr(image, topic.name))
        if new_isr != partition.isr or elr != partition.eligible_leader_replicas:
            batch.add(
                PartitionChangeRecord(
                    partition_id=request.partition,
                    topic_id=request.topic_id,
                    isr=None if new_isr == partition.isr else new_isr,
                    eligible_leader_replicas=(
                        None if elr == partition.eligible_leader_replicas else elr
                    ),
                )
            )
        after = batch.image.topics.partition(request.topic_id, request.partition)
        assert after is not None
        # A reassignment completes once its adding replicas are in sync (KIP-455).
        done = completion_record(
            request.topic_id,
            request.partition,
            after,
            is_active=lambda b: is_active_broker(batch.image, b),
        )
        if done is not None:
            batch.add(done)
            after = batch.image.topics.partition(request.topic_id, request.partition)
            assert after is not None
        return batch.result(
            AlterPartitionResponse(
                topic_id=request.topic_id,
                partition=request.partition,
                leader=after.leader,
                leader_epoch=after.leader_epoch,
                partition_epoch=after.partition_epoch,
                isr=after.isr,
            )
        )

    def _imbalanced(
        self, image: MetadataImage
    ) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
        """Partitions not led by their preferred replica although it could lead."""
        for topic, index, partition in _partitions(image):
            preferred = partition.preferred_leader()
            if (
                partition.leader != preferred
                and preferred in partition.isr
                and is_active_broker(image, preferred)
            ):
                yield topic, index, partition

    def rebalance_leaders(
        self, image: MetadataImage, now_ms: int
    ) -> ControllerResult[RebalanceResponse]:
        """Preferred-leader election: move leadership back to each partition's first
        replica where it is in the ISR and active, at most REBALANCE_ELECTIONS_MAX."""
        self._last_rebalance_ms = now_ms
        batch = CommandBatch(image)
        elected: list[TopicIdPartition] = []
        more = False
        for topic, index, partition in self._imbalanced(image):
            if len(elected) >= REBALANCE_ELECTIONS_MAX:
                more = True
                break
            record = (
                PartitionChangeBuilder(
                    partition,
                    topic.topic_id,
                    index,
                    lambda b: is_active_broker(image, b),
                    min_isr=_min_isr(image, topic.name),
                )
                .set_election(Election.PREFERRED)
                .build()
            )
            assert record is not None and record.leader == partition.preferred_leader()
            batch.add(record)
            elected.append(TopicIdPartition(topic.topic_id, topic.name, index))
        return batch.result(RebalanceResponse(tuple(elected), more))

    def elect_leaders(
        self,
        image: MetadataImage,
        election: Election,
        partitions: Sequence[tuple[str, int]] | None,
    ) -> ControllerResult[ElectLeadersResponse]:
        """ElectLeaders (KIP-460, kafka-leader-election): ``Election.PREFERRED`` makes
        each partition's first replica its leader where it is in the ISR and active;
        ``Election.UNCLEAN`` elects a leader for each leaderless partition, from the ISR
        if a member is active, else from any active replica (the ISR then restarts from
        it: records it lacks are lost, which is what the operator asks for). With
        ``partitions`` None, every partition, and those that need no election are left
        out of the answer (as Kafka's controller does)."""
        batch = CommandBatch(image)
        results: list[PartitionOutcome] = []
        if partitions is None:
            wanted = [(t.name, i) for t, i, _ in _partitions(image)]
        else:
            wanted = list(dict.fromkeys(partitions))  # once each, in the asked order
        for name, index in wanted:
            topic = image.topics.by_name.get(name)
            partition = None if topic is None else topic.partition(index)
            if topic is None or partition is None:
                error: KafkaError | None = UnknownTopicOrPartitionError(
                    f"{name}-{index} does not exist"
                )
            else:
                builder = PartitionChangeBuilder(
                    partition,
                    topic.topic_id,
                    index,
                    lambda b: is_active_broker(image, b),
                    unclean_election=election is Election.UNCLEAN,
                    min_isr=_min_isr(image, name),
                )
                error = _election_refusal(image, election, name, index, partition)
                if error is None:
                    record = builder.set_election(
                        Election.PREFERRED if election is Election.PREFERRED else Election.ANY
                    ).build()
                    if record is None or record.leader in (NO_LEADER, NO_LEADER_CHANGE):
                        error = EligibleLeadersNotAvailableError(
                            f"{name}-{index}: no active replica can lead"
                        )
                    else:
                        batch.add(record)
            if partitions is None and isinstance(error, ElectionNotNeededError):
                continue
            results.append(PartitionOutcome(name, index, error))
        return batch.result(ElectLeadersResponse(tuple(results)))

    def alter_partition_reassignments(
        self,
        image: MetadataImage,
        reassignments: Sequence[tuple[str, int, Sequence[int] | None]],
    ) -> ControllerResult[ReassignmentsResponse]:
        """AlterPartitionReassignments (KIP-455): start each (topic, partition, target
        replicas) reassignment, or cancel it (target None); see
        :mod:`raftka.metadata.reassignment`. One that needs no copy completes at once."""
        batch = CommandBatch(image)
        results: list[PartitionOutcome] = []

        def active(b: int) -> bool:  # broker states do not change in this command
            return is_active_broker(image, b)

        for name, index, target in reassignments:
            where = f"{name}-{index}"
            topic = batch.image.topics.by_name.get(name)
            partition = None if topic is None else topic.partition(index)
            error: KafkaError | None = None
            if topic is None or partition is None:
                error = UnknownTopicOrPartitionError(f"{where} does not exist")
            else:
                try:
                    record = start_record(
                        batch.image,
                        topic.topic_id,
                        index,
                        partition,
                        target,
                        where=where,
                        is_active=active,
                    )
                except KafkaError as e:
                    error = e
                else:
                    if record is not None:
                        batch.add(record)
                        started = batch.image.topics.partition(topic.topic_id, index)
                        assert started is not None
                        done = completion_record(topic.topic_id, index, started, is_active=active)
                        if done is not None:
                            batch.add(done)
            results.append(PartitionOutcome(name, index, error))
        return batch.result(ReassignmentsResponse(tuple(results)))

    # -- producer ids -----------------------------------------------------------------

    def allocate_producer_ids(
        self, image: MetadataImage, broker_id: int, broker_epoch: int
    ) -> ControllerResult[AllocateProducerIdsResponse]:
        """AllocateProducerIds: the next block of PRODUCER_ID_BLOCK_SIZE ids."""
        _check_broker_epoch(image, broker_id, broker_epoch)
        start = image.producer_ids.next_producer_id
        if start > 2**63 - 1 - PRODUCER_ID_BLOCK_SIZE:
            raise UnknownServerError("Exhausted all producer ids")
        record = ProducerIdsRecord(
            broker_id=broker_id,
            broker_epoch=broker_epoch,
            next_producer_id=start + PRODUCER_ID_BLOCK_SIZE,
        )
        batch = CommandBatch(image)
        batch.add(record)
        return batch.result(AllocateProducerIdsResponse(start, PRODUCER_ID_BLOCK_SIZE))

    # -- timers -----------------------------------------------------------------------

    def deadlines(self, image: MetadataImage, now_ms: int) -> ControllerDeadlines:
        """When to run ``expire_sessions`` (just after the earliest unfenced broker's
        session ends) and ``rebalance_leaders`` (an interval after the last run, when
        auto.leader.rebalance.enable and some partition is imbalanced)."""
        expiry: int | None = None
        for broker in image.cluster.live_brokers():
            session = self._session(broker.broker_id, now_ms)
            due = session.last_contact_ms + self.config.broker_session_timeout_ms + 1
            expiry = due if expiry is None else min(expiry, due)
        rebalance: int | None = None
        if self.config.auto_leader_rebalance_enable and next(self._imbalanced(image), None):
            rebalance = self._last_rebalance_ms + self.config.leader_imbalance_check_interval_ms
        return ControllerDeadlines(expiry, rebalance)
