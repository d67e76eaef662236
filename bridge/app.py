"""``create_app(settings)``: the aiohttp application, its typed state and its lifetimes.

Backends are chosen once: proxy mode talks to Tempo and Pyroscope over HTTP (one ``ClientSession`` each, created in
a cleanup context, explicit timeouts); standalone mode serves the same mounts from the embedded store. Either way
``traces_of(app)`` and ``profiles_of(app)`` are what the resolver, the pages and ``/readyz`` use.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bridge.config import Settings
from bridge.connect import Deadline
from bridge.metrics import Metrics
from bridge.middleware import make_middleware
from bridge.spancache import SpanCache
from bridge.upstream.base import CallContext, ProfileSource, TraceSource

SETTINGS = web.AppKey("settings", Settings)
METRICS = web.AppKey("metrics", Metrics)
SPAN_CACHE = web.AppKey("span_cache", SpanCache)


@dataclass(slots=True)
class Backends:
    """Filled while the app starts (an aiohttp app's own state is frozen by then), read through ``traces_of`` and
    ``profiles_of``. ``extras`` holds what a mode opens besides (the store, gRPC servers, scrapers)."""

    traces: TraceSource | None = None
    profiles: ProfileSource | None = None
    extras: dict[str, Any] = field(default_factory=dict)


BACKENDS = web.AppKey("backends", Backends)


@dataclass(frozen=True, slots=True)
class Clock:
    """Wall-clock time (``time.time``), injectable so tests never depend on the real clock."""

    now: Callable[[], float] = time.time


CLOCK = web.AppKey("clock", Clock)


def traces_of(app: web.Application) -> TraceSource:
    traces = app[BACKENDS].traces
    if traces is None:
        raise RuntimeError("the app has not started: no trace backend yet")
    return traces


def profiles_of(app: web.Application) -> ProfileSource:
    profiles = app[BACKENDS].profiles
    if profiles is None:
        raise RuntimeError("the app has not started: no profile backend yet")
    return profiles


def call_context(
    request: web.Request, *, requested_timeout: float | None = None, cap: float | None = None
) -> CallContext:
    """One budget per incoming request (``requested_timeout``, e.g. from ``Connect-Timeout-Ms``, capped by
    ``PROFILE_BRIDGE_MAX_REQUEST_TIMEOUT`` or ``cap``) and the caller's tenant and credentials, carried to every
    upstream call made on its behalf."""
    settings = request.app[SETTINGS]
    return CallContext(
        deadline=Deadline.start(requested_timeout, cap if cap is not None else settings.max_request_timeout),
        tenant=request.headers.get("X-Scope-OrgID") or None,
        authorization=request.headers.get("Authorization") or None,
    )


def create_app(settings: Settings, *, wall_clock: Callable[[], float] = time.time) -> web.Application:
    metrics = Metrics()
    app = web.Application(middlewares=[make_middleware(metrics)], client_max_size=settings.max_body_bytes)
    app[SETTINGS] = settings
    app[METRICS] = metrics
    app[CLOCK] = Clock(wall_clock)
    app[BACKENDS] = Backends()
    app[SPAN_CACHE] = SpanCache(settings.span_cache_size, settings.span_cache_bytes, settings.span_cache_ttl)

    from bridge.routes import health

    health.setup(app)
    from bridge.routes import pyroscope

    pyroscope.setup(app)
    from bridge.routes import tempo

    tempo.setup(app)
    from bridge.routes import api, pages

    api.setup(app)
    pages.setup(app)
    from bridge.routes import ingest

    ingest.setup(app)
    from bridge.routes import otlp

    otlp.setup(app)
    app.cleanup_ctx.append(_backends)
    app.cleanup_ctx.append(_otlp_gateway)
    return app


async def _backends(app: web.Application) -> AsyncIterator[None]:
    """Open the backends for the app's lifetime: HTTP clients in proxy mode, the store in standalone mode."""
    settings = app[SETTINGS]
    if settings.is_standalone:
        from bridge.store.runtime import standalone_backends

        async with standalone_backends(app):
            yield
        return
    from bridge.upstream.http import open_clients

    async with open_clients(settings, app[METRICS]) as (traces, profiles):
        app[BACKENDS].traces = traces
        app[BACKENDS].profiles = profiles
        yield


async def _otlp_gateway(app: web.Application) -> AsyncIterator[None]:
    """The OTLP profile link gateway (after ``_backends``: standalone mode hands it the store's sink): the gRPC
    receiver and the pprof puller, published in ``app[BACKENDS].extras``."""
    from bridge.otlp.runtime import open_gateway

    async with open_gateway(app[SETTINGS], app[METRICS], app[BACKENDS].extras, wall_clock=app[CLOCK].now):
        yield
