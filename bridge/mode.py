"""The mode, chosen once at start (``choose_mode``: the one place that reads ``settings.mode``), and what each opens
for the app's lifetime: the ``Backends`` record the routes, pages, resolver and gateway use — filled the same way by
both modes.

- **Proxy**: Tempo and Pyroscope over HTTP (one session each, explicit timeouts); the mounts pass through to them;
  the link gateway forwards to Pyroscope. The bridge holds no data, only bounded caches.
- **Standalone**: the embedded store under ``PROFILE_BRIDGE_DATA_DIR`` answers both mounts and receives SDK ingest
  and the gateway's linked profiles; retention runs in the background.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Protocol

from bridge.config import Settings
from bridge.diskfull import DiskFull, WatchedSink
from bridge.metrics import Metrics
from bridge.otlp.runtime import open_gateway
from bridge.resolve import Resolver
from bridge.services import ProfiledServices, service_label
from bridge.spancache import SpanCache
from bridge.state import Backends, Clock
from bridge.store.backend import Store
from bridge.store.querier_api import StorePyroscope
from bridge.store.runtime import maintenance_loop, retention_interval
from bridge.store.tempo_api import StoreTempo
from bridge.tasks import cancel_all, spawn
from bridge.upstream.exemplars import ExemplarIndex
from bridge.upstream.http import PyroscopeClient, TempoClient, new_session
from bridge.upstream.mounts import PyroscopeForward, TempoForward

log = logging.getLogger("bridge.mode")


class Mode(Protocol):
    name: str
    keeps_data: bool  # SDKs send to this bridge (its ingest routes exist)

    def open(
        self, settings: Settings, metrics: Metrics, clock: Clock, span_cache: SpanCache
    ) -> contextlib.AbstractAsyncContextManager[Backends]: ...


def choose_mode(settings: Settings) -> Mode:
    return StandaloneMode() if settings.mode == "standalone" else ProxyMode()


class ProxyMode:
    name = "proxy"
    keeps_data = False

    @contextlib.asynccontextmanager
    async def open(
        self, settings: Settings, metrics: Metrics, clock: Clock, span_cache: SpanCache
    ) -> AsyncIterator[Backends]:
        async with new_session(settings) as tempo_session, new_session(settings) as pyroscope_session:
            traces = TempoClient(tempo_session, settings.tempo_url, settings, metrics)
            profiles = PyroscopeClient(pyroscope_session, settings.pyroscope_url, settings, metrics)
            async with open_gateway(settings, metrics, wall_clock=clock.now) as otlp:
                yield Backends(
                    name=self.name,
                    traces=traces,
                    profiles=profiles,
                    resolver=Resolver(traces, profiles, span_cache, settings, metrics, clock=clock.now),
                    pyroscope=PyroscopeForward(pyroscope_session, settings.pyroscope_url, settings, metrics),
                    tempo=TempoForward(tempo_session, settings.tempo_url, settings, metrics),
                    profiled_services=ProfiledServices(
                        profiles, service_label(settings), settings.services_cache_ttl, wall_clock=clock.now
                    ),
                    gateway=otlp.gateway,
                    functions=ExemplarIndex(profiles),
                    grpc=otlp.grpc,
                    puller=otlp.puller,
                )


class StandaloneMode:
    name = "standalone"
    keeps_data = True

    @contextlib.asynccontextmanager
    async def open(
        self, settings: Settings, metrics: Metrics, clock: Clock, span_cache: SpanCache
    ) -> AsyncIterator[Backends]:
        store = await Store.open(
            settings.data_dir, clock=clock.now, metrics=metrics, retention_age=settings.retention_age
        )
        retention = spawn(maintenance_loop(store, settings, retention_interval(settings)), "store-maintenance")
        # every write goes through the watch: a full disk is one episode (503 Retry-After, ERROR once, not ready)
        disk_full = DiskFull(settings.data_dir, metrics, wall_clock=clock.now)
        sink = WatchedSink(store, disk_full)
        try:
            async with open_gateway(settings, metrics, sink=sink, trace_sink=sink, wall_clock=clock.now) as otlp:
                log.info("standalone mode: store at %s", store.path)
                yield Backends(
                    name=self.name,
                    traces=store,
                    profiles=store,
                    resolver=Resolver(store, store, span_cache, settings, metrics, clock=clock.now, periods=store),
                    pyroscope=StorePyroscope(store),
                    tempo=StoreTempo(store),
                    profiled_services=ProfiledServices(
                        store, service_label(settings), settings.services_cache_ttl, wall_clock=clock.now
                    ),
                    gateway=otlp.gateway,
                    functions=store,
                    ingest=sink,
                    grpc=otlp.grpc,
                    puller=otlp.puller,
                    disk_full=disk_full,
                )
        finally:
            await cancel_all([retention])
            await store.close()
