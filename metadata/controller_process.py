"""The controller process: the quorum engine, the event loop and its API behind a socket.

Theory of operation
-------------------
``raftka controller`` (and the controller half of ``raftka server`` in combined mode)
builds the configured quorum engine (:func:`create_engine`: the native KRaft engine,
or pysyncobj, imported only when chosen so that it stays optional), wraps it in a
:class:`ControllerServer` and runs until SIGTERM or SIGINT. A ``ControllerServer`` is
the :class:`~raftka.metadata.controller_events.ControllerEventLoop` (the metadata
loader, the single command queue, the timers) plus the aiohttp app of
``raftka.metadata.routes``, which also carries the engine's peer routes. It starts
serving before the engine starts (the engine's peers reach it through that app) and
stops serving last, after the engine resigned. Logging is process-wide
(``raftka.server_common.logging_setup``): JSON lines on stderr.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import signal
from typing import Any, cast

from aiohttp import web

from raftka.metadata.controller_events import ControllerEventLoop
from raftka.metadata.metrics import ControllerMetrics
from raftka.metadata.routes import build_controller_app
from raftka.raft.quorum.engine import QuorumEngine
from raftka.server_common.logging_setup import configure_logging
from raftka.server_common.metrics import new_registry
from raftka.server_common.node_config import NodeConfig
from raftka.server_common.supervision import install_process_fatal

__all__ = ["ControllerServer", "create_engine", "run_controller", "serve_until_signalled"]

log = logging.getLogger("raftka.controller")


class ControllerServer(ControllerEventLoop):
    """One controller with its HTTP API. ``await start()`` serves on the configured
    port unless ``listen=False`` (tests that drive ``app`` directly), then
    ``await stop()``."""

    # Set by start(); the runner exists while the app is served on a socket.
    _listen_socket = True
    _runner: web.AppRunner | None = None

    @functools.cached_property
    def metrics(self) -> ControllerMetrics:
        """This controller's metrics, in a registry of its own (metadata/metrics.py)."""
        return ControllerMetrics(new_registry(), self)

    @functools.cached_property
    def app(self) -> web.Application:
        """The controller's aiohttp app (built on first use: by start(), or by a test
        that drives it directly)."""
        return build_controller_app(self, log, self.metrics)

    async def start(self, *, listen: bool = True) -> None:
        self._listen_socket = listen
        await super().start()

    async def _listen(self) -> None:
        if not self._listen_socket:
            return
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner,
            self.config.listen_host,
            self.config.listen_port,
            reuse_address=True,
            ssl_context=self.config.http.server_ssl,
        )
        await site.start()

    async def _close_listener(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def create_engine(config: NodeConfig) -> QuorumEngine:
    """The configured quorum engine (imported here only: pysyncobj stays optional)."""
    voters = dict(config.voters)
    if config.quorum_engine == "native":
        module = importlib.import_module("raftka.raft.quorum.native")
        engine = module.NativeQuorumEngine(
            config.node_id, voters, config.metadata_log_dir, config.quorum, http=config.http
        )
    else:
        module = importlib.import_module("raftka.raft.quorum.pysyncobj_engine")
        kwargs: dict[str, Any] = {"port_offset": config.pysyncobj_port_offset}
        if config.pysyncobj_password is not None:
            kwargs["password"] = config.pysyncobj_password
        engine = module.PysyncobjQuorumEngine(
            config.node_id, voters, config.metadata_log_dir, **kwargs
        )
    return cast(QuorumEngine, engine)


async def serve_until_signalled(server: ControllerServer) -> int:
    """Run until SIGTERM or SIGINT, then stop cleanly (the leader resigns first): exit
    code 0; or until a background task dies (server_common/supervision.py): a bounded
    clean stop, exit code 1."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    fatal = install_process_fatal()
    await server.start()
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(fatal.event.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for w in waits:
        w.cancel()
    return await fatal.shut_down(server.stop, log)


def run_controller(config: NodeConfig) -> int:
    """The ``raftka controller`` process; returns its exit code."""
    configure_logging(config.log_level)
    config.metadata_log_dir.mkdir(parents=True, exist_ok=True)
    engine = create_engine(config)
    server = ControllerServer(config, engine)
    try:
        return asyncio.run(serve_until_signalled(server))
    except OSError as e:
        log.error("controller failed", extra={"fields": {"error": str(e)}})
        return 1
