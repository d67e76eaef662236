"""The link gateway's lifetime inside the app: the gateway itself (forwarding to Pyroscope, or into a sink such as
the standalone store), the OTLP gRPC receiver when enabled (with the trace service when a trace sink is given) and
the pprof puller when targets are set; all stopped on exit. The mode (``bridge.mode``) opens it."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import aiohttp

from bridge.config import Settings
from bridge.metrics import Metrics
from bridge.otlp import fastlink
from bridge.otlp.gateway import Gateway, ProfileSink
from bridge.otlp.grpc_server import GrpcServer, TraceSink, start_grpc_server
from bridge.otlp.pull import Puller
from bridge.upstream.http import new_session
from bridge.upstream.otlp_forward import GrpcProfilesForwarder, HttpProfilesForwarder, ProfilesForwarder

log = logging.getLogger("bridge.otlp")


@dataclass(frozen=True, slots=True)
class GatewayParts:
    gateway: Gateway
    grpc: GrpcServer | None
    puller: Puller | None


@contextlib.asynccontextmanager
async def open_gateway(
    settings: Settings,
    metrics: Metrics,
    *,
    sink: ProfileSink | None = None,
    trace_sink: TraceSink | None = None,
    wall_clock: Callable[[], float] = time.time,
) -> AsyncIterator[GatewayParts]:
    """``sink``: linked profiles go there; None: forwarded to Pyroscope (``PROFILE_BRIDGE_PROFILES_FORWARD``)."""
    session: aiohttp.ClientSession | None = None
    forwarder: ProfilesForwarder | None = None
    grpc_server: GrpcServer | None = None
    puller: Puller | None = None
    try:
        if sink is None:
            if settings.profiles_forward == "grpc":
                forwarder = GrpcProfilesForwarder(settings.pyroscope_grpc_target, settings, metrics)
            else:
                session = new_session(settings)
                forwarder = HttpProfilesForwarder(session, settings.pyroscope_url, settings, metrics)
        gateway = Gateway(settings, metrics, forwarder=forwarder, sink=sink)
        if settings.otlp_grpc_enabled:
            grpc_server = await start_grpc_server(settings, gateway, trace_sink)
        if settings.pprof_targets:
            if session is None:
                session = new_session(settings)
            puller = Puller(settings, session, gateway, metrics, wall_clock)
            puller.start()
        log.info("OTLP profile link gateway → %s (%s linker)", gateway.destination, fastlink.IMPLEMENTATION)
        yield GatewayParts(gateway, grpc_server, puller)
    finally:
        if puller is not None:
            await puller.stop()
        if grpc_server is not None:
            await grpc_server.stop()
        if forwarder is not None:
            await forwarder.close()
        if session is not None:
            await session.close()
