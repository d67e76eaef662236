"""The link gateway's lifetime inside the app (a cleanup context after ``_backends``): build the gateway for the
mode (forward to Pyroscope in proxy mode, the store's profile sink in standalone mode), start the gRPC receiver when
enabled and the pprof puller when targets are set; stop them all on shutdown.

Published in ``app[BACKENDS].extras``: ``otlp_gateway`` (``Gateway``), ``otlp_grpc`` (``GrpcServer``, with the bound
``port``), ``pprof_pull`` (``Puller``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp

from bridge.config import Settings
from bridge.metrics import Metrics
from bridge.otlp import fastlink
from bridge.otlp.gateway import Gateway
from bridge.otlp.grpc_server import GrpcServer, start_grpc_server
from bridge.otlp.pull import Puller
from bridge.upstream.http import new_session
from bridge.upstream.otlp_forward import GrpcProfilesForwarder, HttpProfilesForwarder, ProfilesForwarder

log = logging.getLogger("bridge.otlp")


@contextlib.asynccontextmanager
async def open_gateway(
    settings: Settings, metrics: Metrics, extras: dict[str, Any], *, wall_clock: Callable[[], float] = time.time
) -> AsyncIterator[Gateway]:
    session: aiohttp.ClientSession | None = None
    forwarder: ProfilesForwarder | None = None
    sink = extras.get("profile_sink") if settings.is_standalone else None
    grpc_server: GrpcServer | None = None
    puller: Puller | None = None
    try:
        if not settings.is_standalone:
            if settings.profiles_forward == "grpc":
                forwarder = GrpcProfilesForwarder(settings.pyroscope_grpc_target, settings, metrics)
            else:
                session = new_session(settings)
                forwarder = HttpProfilesForwarder(session, settings.pyroscope_url, settings, metrics)
        gateway = Gateway(settings, metrics, forwarder=forwarder, sink=sink)
        extras["otlp_gateway"] = gateway
        if settings.otlp_grpc_enabled:
            grpc_server = await start_grpc_server(settings, gateway, extras.get("trace_sink"))
            extras["otlp_grpc"] = grpc_server
        if settings.pprof_targets:
            if session is None:
                session = new_session(settings)
            puller = Puller(settings, session, gateway, metrics, wall_clock)
            puller.start()
            extras["pprof_pull"] = puller
        log.info("OTLP profile link gateway → %s (%s linker)", gateway.destination, fastlink.IMPLEMENTATION)
        yield gateway
    finally:
        if puller is not None:
            await puller.stop()
        if grpc_server is not None:
            await grpc_server.stop()
        if forwarder is not None:
            await forwarder.close()
        if session is not None:
            await session.close()
