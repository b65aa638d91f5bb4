"""The broker process: its aiohttp API and the tasks around the ReplicaManager.

:class:`BrokerServer` wires the parts together: the :class:`LogManager` (partition
directories, HW checkpoints), the :class:`ReplicaManager` (replica states, produce,
fetch, purgatory), the replica fetchers, the :class:`MetadataFollower` (committed
metadata in log order -> ``apply_metadata``) and the :class:`BrokerLifecycle`
(registration, heartbeats, controlled shutdown). The routes are a thin layer: decode
the request's message (:mod:`raftka.common.messages.broker`), call the manager, encode
the answer's message. The API is in docs/broker-api.md. A produce with a
``transactional_id`` is verified with the transaction coordinator first
(:mod:`raftka.broker.txn_verification`); ``/v1/write-txn-markers`` is
:mod:`raftka.broker.txn_markers`.

Start-up: open the HTTP listener, register (the broker epoch is needed by followers'
fetches and AlterPartition), then follow the metadata log and heartbeat. Shutdown
(SIGTERM/SIGINT): controlled shutdown (leaderships move away while we keep serving and
replicating), then stop the fetchers, fail parked produces, write the HW checkpoint
and close every log cleanly, stop serving, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

import aiohttp
import orjson
from aiohttp import web

from raftka.broker.broker_configs import broker_configs_routes
from raftka.broker.config import BrokerConfig
from raftka.broker.coordinator.routes import coordinator_routes
from raftka.broker.coordinator.service import GroupCoordinatorService
from raftka.broker.coordinator.transaction_routes import transaction_routes
from raftka.broker.coordinator.transaction_service import TransactionCoordinatorService
from raftka.broker.delete_records import delete_records_routes
from raftka.broker.describe_producers import describe_producers_route
from raftka.broker.http_acls import (
    ACL_PATHS,
    HttpAcls,
    install,
    refuse_producer,
    request_access,
    topic_refused,
)
from raftka.broker.io_workers import LoopLagMonitor
from raftka.broker.kafka import KafkaListener
from raftka.broker.kafka.apis import KAFKA_ENDPOINT
from raftka.broker.kafka.authorization import ALLOW_ALL, Access, has_idempotent_batch
from raftka.broker.leader_hws import LeaderHighWatermarks
from raftka.broker.lifecycle import BrokerLifecycle, ControllerChannel
from raftka.broker.log_cleaning import LogCleanerService
from raftka.broker.log_dirs import log_dirs_routes
from raftka.broker.metadata_follower import MetadataFollower
from raftka.broker.metrics import BrokerMetrics
from raftka.broker.producer_ids import ProducerIdManager
from raftka.broker.replication.fetcher import ReplicaFetcherManager
from raftka.broker.replication.manager import (
    FetchPartition,
    FetchResult,
    ListOffsetsResult,
    ProduceResult,
    ReplicaManager,
)
from raftka.broker.txn_markers import TxnMarkerHook, write_txn_markers_route
from raftka.broker.txn_verification import TxnVerifier, has_transactional_batch
from raftka.common.acl import AclOperation
from raftka.common.errors import (
    BrokerNotAvailableError,
    InvalidRequestError,
    KafkaError,
    RequestTimedOutError,
    UnknownServerError,
)
from raftka.common.messages import Message, decode, decode_value, encode
from raftka.common.messages import broker as api
from raftka.common.messages.controller import AlterPartitionRequest, AlterPartitionResponse
from raftka.common.time import monotonic_ms, wall_clock_ms
from raftka.common.wire import FRAME_CONTENT_TYPE
from raftka.metadata.delta import LocalReplicaChanges
from raftka.metadata.image import MetadataImage
from raftka.metadata.metadata_records import NO_LEADER
from raftka.metadata.routes import describe_acls_route, describe_scram_credentials_route
from raftka.server_common.http_errors import error_middleware, json_response
from raftka.server_common.logging_setup import configure_logging
from raftka.server_common.metrics import metrics_route, new_registry
from raftka.server_common.node_http import require_node
from raftka.server_common.sasl import ScramCredential
from raftka.server_common.supervision import (
    Supervisor,
    install_process_fatal,
)
from raftka.storage.cleaner import LogCleaner
from raftka.storage.log_manager import LogManager

__all__ = ["BrokerServer", "run_broker"]

log = logging.getLogger(__name__)

LISTENER_NAME: Final = "PLAINTEXT"
#: Bound on a request body (a produce of many partitions).
REQUEST_BYTES_MAX: Final = 64 * 1024 * 1024

_STATUS: Final = {
    "UNKNOWN_SERVER_ERROR": 500,
    "REQUEST_TIMED_OUT": 503,
    # A follower fetch or verification from a principal that is not a node (HTTPS).
    "CLUSTER_AUTHORIZATION_FAILED": 403,
    # A principal the ACLs refuse (broker/http_acls.py).
    "TOPIC_AUTHORIZATION_FAILED": 403,
    "GROUP_AUTHORIZATION_FAILED": 403,
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": 403,
}


class BrokerServer:
    """One broker: see the module docstring."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.logs = LogManager(config.log_dirs, cleaner=LogCleaner(config.cleaner_config()))
        self.manager = ReplicaManager(config=config, logs=self.logs)
        # log.cleaner.enable: compaction of cleanup.policy=compact topics
        # (broker/log_cleaning.py); the checkpoint upkeep on truncation and delete runs
        # even when it is off, so turning it on later starts from a true checkpoint.
        self.cleaner: LogCleanerService | None = None
        if config.log_cleaner_enable:
            assert self.logs.cleaner is not None
            self.cleaner = LogCleanerService(
                self.manager, self.logs.cleaner, backoff_ms=config.log_cleaner_backoff_ms
            )
        self._session: aiohttp.ClientSession | None = None
        self.channel: ControllerChannel | None = None
        self.producer_ids: ProducerIdManager | None = None
        self.lifecycle: BrokerLifecycle | None = None
        self.follower: MetadataFollower | None = None
        self.fetchers: ReplicaFetcherManager | None = None
        self._runner: web.AppRunner | None = None
        # Kafka's binary protocol (broker/kafka/), when `listeners` names a PLAINTEXT one.
        self.kafka: KafkaListener | None = None
        # (supervise) every background task runs under it: restart or fail the process
        self.supervisor = Supervisor()
        # The event loop's lag (broker/io_workers.py), started before anything else so
        # it sees log recovery at start-up.
        self.loop_lag = LoopLagMonitor()
        self._stopping = False
        self.coordinator = GroupCoordinatorService(
            config=config, replicas=self.manager, channel=lambda: self.channel
        )
        # The transaction coordinator (broker/coordinator/transaction_service.py).
        self.transactions = TransactionCoordinatorService(
            config=config,
            replicas=self.manager,
            channel=lambda: self.channel,
            producer_ids=lambda: self.producer_ids,
            session=lambda: self._session,
            address_of=self.address_of,
        )
        self.coordinator.find_transaction_coordinator = self.transactions.find_coordinator
        # GET /metrics (broker/metrics.py): this broker's own registry.
        self.metrics = BrokerMetrics(new_registry())
        # Consumer lag of partitions with no replica here: their leaders' HW, asked at
        # scrape time (broker/leader_hws.py).
        self.leader_hws = LeaderHighWatermarks(
            image=lambda: self.manager.image,
            address_of=self.address_of,
            session=lambda: self._session,
            wanted=self._lag_partitions_elsewhere,
            http=config.http,
        )
        # KIP-890 part 1 on produce (broker/txn_verification.py).
        self.txn_verifier = TxnVerifier(
            image=lambda: self.manager.image,
            address_of=self.address_of,
            session=lambda: self._session,
            http=config.http,
        )
        if config.transaction_partition_verification_enable:
            # TxnOffsetCommit's batches are verified like a producer's (KIP-890 part 1).
            self.coordinator.txn_verifier = self.txn_verifier
        # (topic, partition, producer_id, committed) after a transaction marker was
        # written to a __consumer_offsets partition (broker/txn_markers.py): the group
        # coordinator completes that producer's transactional offsets.
        self.on_txn_marker: TxnMarkerHook = self._complete_txn_offsets
        self.metrics.watch(self)
        self.app = self._build_app()

    # ------------------------------------------------------------------ wiring

    def _complete_txn_offsets(
        self, topic: str, partition: int, producer_id: int, committed: bool
    ) -> None:
        del topic  # always __consumer_offsets: broker/txn_markers.py filters on it
        self.coordinator.complete_transaction(partition, producer_id, committed)

    def _broker_epoch(self) -> int:
        epoch = None if self.lifecycle is None else self.lifecycle.broker_epoch
        return -1 if epoch is None else epoch

    def _lag_partitions_elsewhere(self) -> set[tuple[str, int]]:
        """Partitions the groups coordinated here committed, with no replica here."""
        core = self.coordinator.core
        local = self.manager.partitions
        return {
            (tp.topic, tp.partition)
            for group_id in core.group_ids()
            for tp in core.committed(group_id)
            if (tp.topic, tp.partition) not in local
        }

    def address_of(self, broker_id: int) -> str | None:
        broker = self.manager.image.cluster.broker(broker_id)
        if broker is None or not broker.endpoints:
            return None
        endpoint = broker.endpoint(LISTENER_NAME) or broker.endpoints[0]
        return f"{endpoint.host}:{endpoint.port}"

    async def _on_metadata(self, image: MetadataImage, changes: LocalReplicaChanges) -> None:
        await self.manager.on_metadata(image, changes)
        self.coordinator.on_metadata()
        self.transactions.on_metadata()

    async def _send_alter_partition(
        self, request: AlterPartitionRequest, *, timeout_ms: int
    ) -> AlterPartitionResponse:
        assert self.channel is not None
        answer = await self.channel.post("/v1/alter-partition", request, timeout_ms=timeout_ms)
        try:
            return decode_value(answer, AlterPartitionResponse)
        except KafkaError as e:
            # Our own controller's answer broke its declared shape: not the client's fault.
            raise UnknownServerError(f"bad AlterPartition answer: {e.message}") from None

    async def start(self) -> None:
        config = self.config
        self.supervisor.spawn("loop-lag", self.loop_lag.run)
        self._session = aiohttp.ClientSession(
            connector=config.http.connector(limit=0),
            json_serialize=lambda o: orjson.dumps(o).decode(),
        )
        self.channel = ControllerChannel(
            config.controllers,
            self._session,
            attempt_timeout_ms=config.controller_quorum_request_timeout_ms,
            http=config.http,
        )
        channel = self.channel

        async def post(path: str, body: dict[str, Any], timeout_ms: int) -> dict[str, Any]:
            return await channel.post(path, body, timeout_ms=timeout_ms)

        self.producer_ids = ProducerIdManager(
            post=post,
            broker_id=config.node_id,
            broker_epoch=self._broker_epoch,
            request_timeout_ms=config.request_timeout_ms,
        )
        self.lifecycle = BrokerLifecycle(
            broker_id=config.node_id,
            channel=self.channel,
            endpoint=(LISTENER_NAME, config.advertised_host, config.advertised_port),
            rack=config.rack,
            extra_endpoints=()
            if config.kafka_listener is None
            else (
                (
                    KAFKA_ENDPOINT,
                    config.kafka_listener.advertised_host,
                    config.kafka_listener.advertised_port,
                ),
            ),
            metadata_offset=lambda: self.manager.image.offset,
            heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
            request_timeout_ms=config.request_timeout_ms,
            clean_shutdown=not self.logs.unclean_shutdown,
        )
        self.fetchers = ReplicaFetcherManager(
            manager=self.manager,
            session=self._session,
            address_of=self.address_of,
            broker_epoch=self._broker_epoch,
            spawn=self._spawn_fetcher,
            http=config.http,
        )
        self.manager.fetch_targets = self.fetchers
        self.manager.alter_partition = self._send_alter_partition
        self.manager.broker_epoch = self._broker_epoch
        self.follower = MetadataFollower(
            broker_id=config.node_id,
            controllers=config.controllers,
            session=self._session,
            listener=self._on_metadata,
            # The first image must include our registration (its offset is the epoch).
            catch_up_to=self._broker_epoch,
            active_controller=lambda: channel.active_address,
            http=config.http,
        )
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner,
            config.listen_host,
            config.listen_port,
            reuse_address=True,
            ssl_context=config.http.server_ssl,
        )
        await site.start()
        log.info(
            "broker listening",
            extra={
                "fields": {
                    "node_id": config.node_id,
                    "listen": f"{config.listen_host}:{config.listen_port}",
                }
            },
        )
        if config.kafka_listener is not None:
            self.kafka = KafkaListener(self, config.kafka_listener)
            await self.kafka.start()
        await self.lifecycle.register()
        # (supervise) begin: the background tasks, each restarted or fatal (see
        # server_common/supervision.py and docs/operations.md, "Supervision")
        spawn = self.supervisor.spawn
        follower, lifecycle = self.follower, self.lifecycle
        # The metadata fetch loop keeps its position in its applier: restartable.
        spawn("metadata", follower.run, restart=True)
        # The rest are fatal: a broker without heartbeats, ISR shrinks, HW checkpoints,
        # retention, producer expiry or its group coordinator is alive but broken.
        spawn("heartbeat", lifecycle.run_heartbeats)
        spawn("isr-shrink", self._isr_timer)
        spawn("hw-checkpoint", self._checkpoint_timer)
        spawn("log-retention", self._retention_timer)
        spawn("log-flusher", self._flush_timer)
        spawn("producer-expiry", self._producer_expiry_timer)
        spawn("group-coordinator", self.coordinator.run)
        spawn("transaction-coordinator", self.transactions.run)
        if self.cleaner is not None:
            # The cleaner service recovers a log from its storage errors itself; an
            # unexpected crash restarts it with a backoff (Kafka restarts cleaner threads).
            spawn("log-cleaner", self.cleaner.run, restart=True)

    def _spawn_fetcher(
        self, name: str, factory: Callable[[], Coroutine[Any, Any, None]]
    ) -> asyncio.Task[None]:
        # Kafka restarts a replica fetcher thread; its partitions stay with the fetcher.
        return self.supervisor.spawn(name, factory, restart=True)

    # (supervise) end

    async def _isr_timer(self) -> None:
        # Half the lag bound: a stuck follower leaves the ISR within 1.5x the bound.
        period_s = max(self.config.replica_lag_time_max_ms // 2, 10) / 1000
        while True:
            await asyncio.sleep(period_s)  # the ISR-shrink timer's period
            self.manager.maybe_shrink_isrs()

    async def _checkpoint_timer(self) -> None:
        period_s = self.config.replica_high_watermark_checkpoint_interval_ms / 1000
        while True:
            await asyncio.sleep(period_s)  # the HW checkpoint period
            try:
                await self.manager.checkpoint_high_watermarks_on_workers()
            except OSError as e:
                log.error("HW checkpoint failed", extra={"fields": {"error": str(e)}})

    async def _retention_timer(self) -> None:
        period_s = self.config.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(period_s)  # log.retention.check.interval.ms
            try:
                deleted = await self.manager.enforce_retention_on_workers()
            except (KafkaError, OSError) as e:  # a storage error: log it, try again next period
                log.error("log retention failed", extra={"fields": {"error": str(e)}})
                continue
            if deleted:
                log.info("log retention", extra={"fields": {"segments_deleted": deleted}})

    async def _flush_timer(self) -> None:
        period_s = self.config.log_flush_scheduler_interval_ms / 1000
        while True:
            await asyncio.sleep(period_s)  # log.flush.scheduler.interval.ms
            try:
                await self.manager.flush_due_logs()  # flush.ms, on the I/O workers
            except KafkaError as e:  # a storage error: log it, try again next period
                log.error("log flush failed", extra={"fields": {"error": str(e)}})

    async def _producer_expiry_timer(self) -> None:
        period_s = self.config.producer_id_expiration_check_interval_ms / 1000
        while True:
            await asyncio.sleep(period_s)  # producer.id.expiration.check.interval.ms
            # Wall clock: the entries' times are batch timestamps (producers' clocks).
            expired = self.manager.expire_producers(now_ms=wall_clock_ms())
            if expired:
                log.info("producer ids expired", extra={"fields": {"count": expired}})

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        if (
            self.lifecycle is not None
            and self.lifecycle.broker_epoch is not None
            and self.config.controlled_shutdown_enable
        ):
            await self.lifecycle.controlled_shutdown(
                timeout_ms=self.config.controlled_shutdown_timeout_ms
            )
        if self.kafka is not None:
            # Kafka clients go first: nothing new arrives while the rest shuts down.
            await self.kafka.close()
        self.coordinator.close()
        await self.transactions.close()
        if self.cleaner is not None:
            # Before the logs close: a running pass ends and gives its log back first.
            await self.cleaner.close()
        await self.supervisor.stop()  # (supervise) the background tasks
        if self.fetchers is not None:
            await self.fetchers.close()
        if self.producer_ids is not None:
            await self.producer_ids.close()
        await self.manager.close()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        log.info("broker stopped", extra={"fields": {"node_id": self.config.node_id}})

    # ------------------------------------------------------------------ routes

    def _build_app(self) -> web.Application:
        # The request metrics outermost: they time the error answers too.
        middlewares = [self.metrics.requests.middleware(), error_middleware(_error_response, log)]
        if self.config.http.secure:
            # Innermost: handlers see only authenticated requests (node_http.py).
            def credential(user: str, mechanism: str) -> ScramCredential | None:
                # The image of the moment: a user added or removed counts at once.
                return self.manager.image.scram_credential(user, mechanism)

            middlewares.append(self.config.http.middleware(credential, ACL_PATHS))
        app = web.Application(middlewares=middlewares, client_max_size=REQUEST_BYTES_MAX)
        app[_SERVER_KEY] = self
        # Kafka's ACL checks on the routes raftka's client uses (broker/http_acls.py).
        install(app, HttpAcls(self.config.authorizer, lambda: self.manager.image))
        app.add_routes(
            [
                web.get("/health", _health),
                metrics_route(self.metrics.registry, before=self.leader_hws.refresh),
                web.post("/v1/produce", _produce),
                web.post("/v1/init-producer-id", _init_producer_id),
                web.post("/v1/fetch", _fetch),
                web.post("/v1/list-offsets", _list_offsets),
                write_txn_markers_route(
                    lambda request: _server(request).manager,
                    lambda request: _server(request).on_txn_marker,
                ),
                describe_producers_route(lambda request: _server(request).manager),
                web.get("/v1/metadata", _metadata),
                *coordinator_routes(self.coordinator),
                *transaction_routes(self.transactions),
                *delete_records_routes(lambda request: _server(request).manager),
                *log_dirs_routes(lambda request: _server(request).manager.logs),
                *broker_configs_routes(_broker_configs),
                describe_scram_credentials_route(lambda request: _server(request).manager.image),
                describe_acls_route(lambda request: _server(request).manager.image),
            ]
        )
        return app

    async def produce(
        self,
        entries: list[tuple[str, int, bytes]],
        *,
        acks: int,
        timeout_ms: int,
        transactional_id: str | None,
    ) -> list[ProduceResult]:
        """The produce, with the transactional checks first (broker/txn_verification.py):
        the HTTP API's and the Kafka listener's."""
        if transactional_id is None:
            if any(has_transactional_batch(data) for _, _, data in entries):
                refused = InvalidRequestError(
                    "transactional record batches need the request's transactional_id"
                )
                return [ProduceResult(topic, index, refused) for topic, index, _ in entries]
            return await self.manager.produce(acks=acks, timeout_ms=timeout_ms, entries=entries)
        if not self.config.transaction_partition_verification_enable:
            return await self.manager.produce(acks=acks, timeout_ms=timeout_ms, entries=entries)
        verified = await self.txn_verifier.verify(
            transactional_id, entries, self.manager.partitions, timeout_ms=timeout_ms
        )
        allowed = [e for e in entries if (e[0], e[1]) not in verified.errors]
        appended = iter(
            await self.manager.produce(
                acks=acks,
                timeout_ms=timeout_ms,
                entries=allowed,
                txn_guards=verified.guards,
            )
        )
        return [
            ProduceResult(topic, index, error)
            if (error := verified.errors.get((topic, index))) is not None
            else next(appended)
            for topic, index, _ in entries
        ]

    def broker_configs(
        self,
    ) -> tuple[int, Mapping[str, str], Mapping[str, str], Mapping[str, str]]:
        """This broker's id, its properties, its dynamic configs and the cluster-wide
        dynamic broker defaults (as committed metadata has them): what DescribeConfigs
        of a broker resource describes, over HTTP and over the Kafka listener."""
        configs = self.manager.image.configs
        return (
            self.config.node_id,
            self.config.properties,
            configs.broker_config(self.config.node_id),
            configs.broker_config(None),
        )

    def active_controller_id(self) -> int | None:
        address = None if self.channel is None else self.channel.active_address
        pairs = zip(self.config.controllers, self.config.controller_ids, strict=False)
        return next((node_id for a, node_id in pairs if a == address), None)

    def health_json(self) -> dict[str, Any]:
        lifecycle = self.lifecycle
        leaders = sum(1 for p in self.manager.partitions.values() if p.state.is_leader)
        return {
            "status": "ok",
            "node_id": self.config.node_id,
            "broker_epoch": self._broker_epoch(),
            "fenced": True if lifecycle is None else lifecycle.is_fenced,
            "metadata_offset": self.manager.image.offset,
            "partitions": len(self.manager.partitions),
            "leaders": leaders,
            "fetch_waiters": self.manager.fetch_waiters,
            "produce_waiters": len(self.manager.purgatory),
            # The reassignment throttles (broker/replication/quota.py).
            "replication_quotas": self.manager.quotas.health(monotonic_ms()),
            # (supervise) task_restarts (per task) and tasks_failed
            **self.supervisor.health(),
            "log_cleaner": None if self.cleaner is None else self.cleaner.health(),
            "io_workers": {**self.manager.io.health(), "appends": self.manager.appends.health()},
            "loop_lag": self.loop_lag.health(),
            # Transaction markers being delivered and the rounds that had to retry.
            "txn_markers": self.transactions.markers.health(),
        }


_SERVER_KEY: Final = web.AppKey("broker_server", BrokerServer)


def _server(request: web.Request) -> BrokerServer:
    return request.app[_SERVER_KEY]


_json = json_response


def _error_response(error: KafkaError) -> web.Response:
    return _json(error.to_wire(), _STATUS.get(error.name, 400))


def _broker_configs(
    request: web.Request,
) -> tuple[int, Mapping[str, str], Mapping[str, str], Mapping[str, str]]:
    return _server(request).broker_configs()


async def _health(request: web.Request) -> web.Response:
    server = _server(request)
    if server.lifecycle is None or server.lifecycle.broker_epoch is None:
        return _json({"status": "starting", "node_id": server.config.node_id}, 503)
    return _json(server.health_json())


def _message(message: Message, status: int = 200) -> web.Response:
    return web.Response(body=encode(message), status=status, content_type="application/json")


def _current_leader(leader: dict[str, Any] | None) -> api.CurrentLeader | None:
    # The replica manager describes the leader as a dict; the wire has a message. (A
    # missing key is our bug: UNKNOWN_SERVER_ERROR, never INVALID_REQUEST.)
    if leader is None:
        return None
    return api.CurrentLeader(
        leader_id=leader["leader_id"],
        leader_epoch=leader["leader_epoch"],
        address=leader["address"],
    )


async def _produce(request: web.Request) -> web.StreamResponse:
    header, payloads = api.decode_frame(await request.read(), api.ProduceRequest)
    entries = [
        (entry.topic, entry.partition, bytes(payload))
        for entry, payload in zip(header.partitions, payloads, strict=True)
    ]
    server = _server(request)
    results = await _authorized_produce(server, request_access(request), entries, header)
    server.metrics.topics.record_produce(entries, results)
    if header.acks == 0:
        return web.Response(status=204)
    return _message(
        api.ProduceResponse(
            responses=tuple(
                api.ProducePartitionResponse(
                    topic=r.topic,
                    partition=r.partition,
                    error=api.error_object(r.error),
                    base_offset=r.base_offset,
                    log_append_time_ms=r.log_append_time_ms,
                    log_start_offset=r.log_start_offset,
                    current_leader=_current_leader(r.current_leader),
                )
                for r in results
            )
        )
    )


async def _authorized_produce(
    server: BrokerServer,
    access: Access,
    entries: list[tuple[str, int, bytes]],
    header: api.ProduceRequest,
) -> list[ProduceResult]:
    """The produce of the partitions the principal may write; the others answered
    Kafka's authorization error (as the Kafka listener's Produce)."""
    tid = header.transactional_id
    refused: KafkaError | None = None
    if access.authorizer is not None and (
        tid is not None or any(has_idempotent_batch(d) for _, _, d in entries)
    ):
        refused = refuse_producer(access, tid)
    if refused is not None:
        return [ProduceResult(t, i, refused) for t, i, _ in entries]
    writable = access.topics(AclOperation.WRITE, (t for t, _, _ in entries))
    allowed = [e for e in entries if e[0] in writable]
    done = (
        await server.produce(
            allowed, acks=header.acks, timeout_ms=header.timeout_ms, transactional_id=tid
        )
        if allowed
        else []
    )
    return _in_request_order(
        entries,
        lambda e: e[0] in writable,
        done,
        lambda e: ProduceResult(e[0], e[1], topic_refused(e[0], AclOperation.WRITE)),
    )


_Asked = TypeVar("_Asked")
_Answer = TypeVar("_Answer")


def _in_request_order(
    asked: Sequence[_Asked],
    allowed: Callable[[_Asked], bool],
    done: Iterable[_Answer],
    refused: Callable[[_Asked], _Answer],
) -> list[_Answer]:
    """One answer per item of ``asked``, in its order: the next of ``done`` (the
    answers to the allowed items, in order) where ``allowed``, else ``refused(item)``."""
    answers = iter(done)
    return [next(answers) if allowed(a) else refused(a) for a in asked]


async def _init_producer_id(request: web.Request) -> web.Response:
    """InitProducerId: an idempotent producer's here; a transactional producer's (with a
    ``transactional_id``) is the transaction coordinator's."""
    # An empty body is every field's default.
    body = decode(await request.read() or b"{}", api.InitProducerIdRequest)
    refused = refuse_producer(request_access(request), body.transactional_id)
    if refused is not None:
        raise refused
    server = _server(request)
    if body.transactional_id is not None:
        return _message(await server.transactions.init_producer_id(body))
    if server.producer_ids is None:
        raise BrokerNotAvailableError("the broker is starting")
    try:
        producer_id = await server.producer_ids.next_producer_id(timeout_ms=body.timeout_ms)
    except TimeoutError:
        raise RequestTimedOutError(
            f"no producer id block from the controller within {body.timeout_ms} ms"
        ) from None
    return _message(api.InitProducerIdResponse(producer_id=producer_id, producer_epoch=0))


def fetch_partitions(fetch: api.FetchRequest) -> list[FetchPartition]:
    """The request's partitions as the replica manager takes them."""
    return [
        FetchPartition(
            topic=p.topic,
            partition=p.partition,
            fetch_offset=p.fetch_offset,
            partition_max_bytes=p.partition_max_bytes,
            current_leader_epoch=p.current_leader_epoch,
            last_fetched_epoch=p.last_fetched_epoch,
            log_start_offset=p.log_start_offset,
        )
        for p in fetch.partitions
    ]


def _fetch_response(r: FetchResult) -> api.FetchPartitionResponse:
    diverging = r.diverging_epoch
    return api.FetchPartitionResponse(
        topic=r.topic,
        partition=r.partition,
        error=api.error_object(r.error),
        high_watermark=r.high_watermark,
        # A follower's answer has no LSO of its own: the HW, as before.
        last_stable_offset=r.last_stable_offset if r.last_stable_offset >= 0 else r.high_watermark,
        log_start_offset=r.log_start_offset,
        diverging_epoch=None
        if diverging is None
        else api.DivergingEpoch(epoch=diverging.epoch, end_offset=diverging.end_offset),
        current_leader=_current_leader(r.current_leader),
        aborted_transactions=None
        if r.aborted_transactions is None
        else tuple(
            api.AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
            for a in r.aborted_transactions
        ),
        records_bytes=len(r.records),
    )


async def _fetch(request: web.Request) -> web.Response:
    fetch = decode(await request.read(), api.FetchRequest)
    if fetch.replica_id >= 0:
        # A follower's fetch (Kafka checks CLUSTER_ACTION): nodes only over HTTPS.
        require_node(request, "a fetch naming a replica_id")
    server = _server(request)
    partitions = fetch_partitions(fetch)
    # A consumer's fetch: READ on each topic. A follower's is a node's, checked above:
    # no question per topic on the replication path.
    access = ALLOW_ALL if fetch.replica_id >= 0 else request_access(request)
    readable = access.topics(AclOperation.READ, (p.topic for p in partitions))
    allowed = [p for p in partitions if p.topic in readable]
    done = (
        await server.manager.fetch(
            replica_id=fetch.replica_id,
            broker_epoch=fetch.broker_epoch,
            max_wait_ms=fetch.max_wait_ms,
            min_bytes=fetch.min_bytes,
            max_bytes=fetch.max_bytes,
            partitions=allowed,
            isolation_level=fetch.isolation_level,
        )
        if allowed
        else []
    )  # nothing to wait max_wait_ms for
    results = _in_request_order(
        partitions,
        lambda p: p.topic in readable,
        done,
        lambda p: FetchResult(p.topic, p.partition, topic_refused(p.topic, AclOperation.READ)),
    )
    server.metrics.topics.record_fetch(results, follower=fetch.replica_id >= 0)
    frame = api.encode_frame(
        api.FetchResponse(responses=tuple(_fetch_response(r) for r in results)),
        [r.records for r in results],
    )
    return web.Response(body=frame, content_type=FRAME_CONTENT_TYPE)


async def _list_offsets(request: web.Request) -> web.Response:
    body = decode(await request.read(), api.ListOffsetsRequest)
    access = request_access(request)
    describable = access.topics(AclOperation.DESCRIBE, (p.topic for p in body.partitions))
    done = _server(request).manager.list_offsets(
        [(p.topic, p.partition, p.timestamp) for p in body.partitions if p.topic in describable],
        isolation_level=body.isolation_level,
    )
    results = _in_request_order(
        body.partitions,
        lambda p: p.topic in describable,
        done,
        lambda p: ListOffsetsResult(
            p.topic, p.partition, topic_refused(p.topic, AclOperation.DESCRIBE)
        ),
    )
    return _message(
        api.ListOffsetsResponse(
            responses=tuple(
                api.ListOffsetsPartitionResponse(
                    topic=r.topic,
                    partition=r.partition,
                    error=api.error_object(r.error),
                    offset=r.offset,
                    timestamp=r.timestamp,
                    leader_epoch=r.leader_epoch,
                )
                for r in results
            )
        )
    )


_LEADER_NOT_AVAILABLE: Final = api.ErrorObject(
    error="LEADER_NOT_AVAILABLE", error_code=5, message="no leader"
)


def _metadata_request(request: web.Request) -> api.MetadataRequest:
    wanted = request.query.get("topics")
    topics = None if wanted is None else tuple(n for n in wanted.split(",") if n)
    return decode_value({"topics": topics}, api.MetadataRequest)


async def _metadata(request: web.Request) -> web.Response:
    server = _server(request)
    image = server.manager.image
    wanted = _metadata_request(request).topics
    names = None if wanted is None else set(wanted)
    # DESCRIBE on each topic: the others are left out of "every topic" and, named,
    # answered TOPIC_AUTHORIZATION_FAILED whether or not they exist (no name leaks).
    visible = request_access(request).topics(
        AclOperation.DESCRIBE, image.topics.by_name if names is None else names
    )
    brokers = []
    for b in image.cluster.live_brokers():
        endpoint = b.endpoint(LISTENER_NAME) or (b.endpoints[0] if b.endpoints else None)
        brokers.append(
            api.MetadataBroker(
                id=b.broker_id,
                host=None if endpoint is None else endpoint.host,
                port=None if endpoint is None else endpoint.port,
                rack=b.rack,
            )
        )
    topics: list[api.MetadataTopic] = []
    for name in sorted(image.topics.by_name):
        if name not in visible:
            continue
        topic = image.topics.by_name[name]
        topics.append(
            api.MetadataTopic(
                name=name,
                topic_id=topic.topic_id,
                partitions=tuple(
                    api.MetadataPartition(
                        partition=index,
                        leader=reg.leader,
                        leader_epoch=reg.leader_epoch,
                        replicas=tuple(reg.replicas),
                        isr=tuple(reg.isr),
                        eligible_leader_replicas=tuple(reg.eligible_leader_replicas),
                        error=None if reg.leader != NO_LEADER else _LEADER_NOT_AVAILABLE,
                    )
                    for index, reg in sorted(topic.partitions.items())
                ),
            )
        )
    for name in sorted((names or set()) - visible):
        error = api.error_object(topic_refused(name, AclOperation.DESCRIBE))
        topics.append(api.MetadataTopic(name=name, error=error))
    for name in sorted(visible - set(image.topics.by_name)):
        topics.append(
            api.MetadataTopic(
                name=name,
                error=api.ErrorObject(
                    error="UNKNOWN_TOPIC_OR_PARTITION", error_code=3, message=name
                ),
            )
        )
    return _message(
        api.MetadataResponse(
            controller_id=server.active_controller_id(),
            controllers=tuple(server.config.controllers),
            brokers=tuple(brokers),
            topics=tuple(topics),
            metadata_offset=image.offset,
        )
    )


# ---------------------------------------------------------------------------------------
# The process


async def serve_until_signalled(server: BrokerServer) -> int:
    """Run until SIGTERM/SIGINT (exit code 0) or a fatal task failure (1)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    fatal = install_process_fatal()  # (supervise)
    starting = asyncio.create_task(server.start())
    stopper = asyncio.create_task(_first(stop.wait(), fatal.event.wait()))
    await asyncio.wait([starting, stopper], return_when=asyncio.FIRST_COMPLETED)
    if starting.done():
        starting.result()  # raise start-up errors
        await stopper
    else:
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
    return await fatal.shut_down(server.stop, log)  # (supervise)


async def _first(*waits: Coroutine[Any, Any, Any]) -> None:
    """Return when the first of ``waits`` does (the others are cancelled)."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


def run_broker(config: BrokerConfig) -> int:
    """The ``raftka broker`` process; returns its exit code."""
    configure_logging(config.log_level)
    server = BrokerServer(config)
    try:
        return asyncio.run(serve_until_signalled(server))
    except OSError as e:
        log.error("broker failed", extra={"fields": {"error": str(e)}})
        return 1
