"""``create_app(settings)``: the aiohttp application, assembled. Nothing imports this module but the command line
(and the tests): the state it sets lives in ``bridge.state``, the backends come from the mode (``bridge.mode``),
chosen once here.

The server never undoes a request's Content-Encoding (``auto_decompress`` is off for every runner of this app, tests'
included): pass-through forwards bodies as sent, and handlers inflate them themselves within their size limits.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from bridge.auth import Auth
from bridge.config import Settings
from bridge.drain import close_when_draining
from bridge.gate import make_gate
from bridge.logs import server_logger
from bridge.metrics import Metrics
from bridge.middleware import make_middleware, nosniff
from bridge.mode import Mode, choose_mode
from bridge.routes import api, health, ingest, otlp, pages, pyroscope, tempo
from bridge.spancache import SpanCache
from bridge.state import CLOCK, METRICS, RUNTIME, SETTINGS, SPAN_CACHE, Clock, Runtime
from bridge.upstream import relay


def create_app(settings: Settings, *, wall_clock: Callable[[], float] = time.time) -> web.Application:
    mode = choose_mode(settings)
    metrics = Metrics()
    # handler_args: request bodies arrive as sent (see above); aiohttp's reports of requests it cannot parse (an
    # oversize header…) go to bridge.server as one rate-limited line instead of a traceback each (bridge.logs)
    auth = Auth.from_settings(settings)  # None: no tokens configured, every route open (docs/security.md)
    middlewares = [make_middleware(metrics)] + ([make_gate(auth)] if auth is not None else [])
    app = web.Application(
        middlewares=middlewares,
        client_max_size=settings.max_body_bytes,
        handler_args={"auto_decompress": False, "logger": server_logger()},
    )
    app.on_response_prepare.append(nosniff)
    app[SETTINGS] = settings
    app[METRICS] = metrics
    app[CLOCK] = Clock(wall_clock)
    app[SPAN_CACHE] = SpanCache(settings.span_cache_size, settings.span_cache_bytes, settings.span_cache_ttl)
    app[RUNTIME] = Runtime()
    relay.setup(app)  # pass-through over the lean relay (bridge.upstream.relay)

    health.setup(app)
    pyroscope.setup(app)
    tempo.setup(app)
    api.setup(app)
    pages.setup(app)
    otlp.setup(app)
    if mode.keeps_data:
        ingest.setup(app)
    metrics.allow_routes(app)  # the route label's closed set: these routes and the labels their handlers set
    if settings.pprof_targets:
        metrics.allow("target", *settings.pprof_targets)
    app.cleanup_ctx.append(_running(mode))
    app.on_response_prepare.append(close_when_draining)  # a stopping worker ends each connection after its answer
    return app


def _running(mode: Mode) -> Callable[[web.Application], AsyncIterator[None]]:
    """The mode's backends for the app's lifetime, published in ``app[RUNTIME]``."""

    async def run(app: web.Application) -> AsyncIterator[None]:
        async with mode.open(app[SETTINGS], app[METRICS], app[CLOCK], app[SPAN_CACHE]) as backends:
            app[RUNTIME].backends = backends
            try:
                yield
            finally:
                app[RUNTIME].backends = None

    return run
