"""``/healthz`` (process alive), ``/readyz`` (every backend answers, and in standalone mode the store takes writes —
not while its disk is full; JSON per backend), ``/metrics``.

``/readyz`` needs no token, so with tokens on a caller who shows none gets each backend's status and code only: the
details (a store's path, an upstream's words) are for callers with a token (docs/security.md)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from bridge.errors import BridgeError
from bridge.state import METRICS, SETTINGS, SPAN_CACHE, TOKENLESS, backends_of, call_context


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    app = request.app
    settings = app[SETTINGS]
    backends = backends_of(app)
    ctx = call_context(request, cap=min(settings.upstream_timeout, 5.0))
    sources = {"tempo": backends.traces, "pyroscope": backends.profiles}

    async def check(source: object) -> dict[str, str]:
        try:
            detail = await source.ready(ctx)  # type: ignore[attr-defined]
        except BridgeError as exc:
            return {"status": "unavailable", "code": exc.code.value, "message": exc.message}
        return {"status": "ready", "detail": detail}

    results = await asyncio.gather(*(check(s) for s in sources.values()))
    detail = dict(zip(sources, results, strict=True))
    if backends.disk_full is not None:
        problem = backends.disk_full.problem()
        detail["store_writes"] = (
            {"status": "unavailable", "code": "unavailable", "message": problem}
            if problem
            else {"status": "ready", "detail": "writes accepted"}
        )
    ok = all(r["status"] == "ready" for r in detail.values())
    if request.get(TOKENLESS):
        detail = {name: {k: v for k, v in r.items() if k in ("status", "code")} for name, r in detail.items()}
    body: dict[str, object] = {"status": "ready" if ok else "unavailable", "mode": backends.name, "upstreams": detail}
    if request.get(TOKENLESS):
        body["details"] = "hidden: send a token for them (docs/security.md)"
    return web.json_response(body, status=200 if ok else 503)


async def metrics(request: web.Request) -> web.Response:
    m = request.app[METRICS]
    m.cache_entries.labels("spans").set(len(request.app[SPAN_CACHE]))
    # rendered on a worker thread: the event loop keeps serving meanwhile (the text is small: every label is a
    # closed set, bridge.metrics)
    body = await asyncio.to_thread(m.render)
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


def setup(app: web.Application) -> None:
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
