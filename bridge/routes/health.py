"""``/healthz`` (process alive), ``/readyz`` (every backend answers; JSON per backend), ``/metrics``."""

from __future__ import annotations

import asyncio

from aiohttp import web

from bridge import app as appmod
from bridge.errors import BridgeError


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    app = request.app
    settings = app[appmod.SETTINGS]
    ctx = appmod.call_context(request, cap=min(settings.upstream_timeout, 5.0))
    sources = {"tempo": appmod.traces_of(app), "pyroscope": appmod.profiles_of(app)}

    async def check(source: object) -> dict[str, str]:
        try:
            detail = await source.ready(ctx)  # type: ignore[attr-defined]
        except BridgeError as exc:
            return {"status": "unavailable", "code": exc.code.value, "message": exc.message}
        return {"status": "ready", "detail": detail}

    results = await asyncio.gather(*(check(s) for s in sources.values()))
    detail = dict(zip(sources, results, strict=True))
    ok = all(r["status"] == "ready" for r in results)
    body = {"status": "ready" if ok else "unavailable", "mode": settings.mode, "upstreams": detail}
    return web.json_response(body, status=200 if ok else 503)


async def metrics(request: web.Request) -> web.Response:
    m = request.app[appmod.METRICS]
    m.cache_entries.labels("spans").set(len(request.app[appmod.SPAN_CACHE]))
    return web.Response(body=m.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


def setup(app: web.Application) -> None:
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
