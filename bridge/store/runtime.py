"""Standalone mode's lifetime: open the store under ``settings.data_dir``, publish it in ``app[BACKENDS]`` (trace and
profile source, ``pyroscope_local`` / ``tempo_local`` handlers, ingest sinks), enforce retention in the background,
close it on shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Final

from aiohttp import web

from bridge.config import Settings
from bridge.store import querier_api, tempo_api
from bridge.store.db import Store
from bridge.tasks import cancel_all, spawn

log = logging.getLogger("bridge.store")

MAX_RETENTION_INTERVAL: Final = 60.0


def retention_interval(settings: Settings) -> float:
    """How often retention runs: every minute, or more often when data expires sooner."""
    return max(1.0, min(MAX_RETENTION_INTERVAL, settings.retention_age / 10))


async def retention_loop(store: Store, settings: Settings, interval: float) -> None:
    while True:
        try:
            result = await store.enforce_retention(settings.retention_age, settings.retention_bytes)
        except Exception:  # noqa: BLE001 - a failed pass is logged and retried on the next tick
            log.exception("store retention pass failed")
        else:
            if result.profiles or result.spans:
                log.info(
                    "retention dropped %d profiles and %d spans; store uses %d bytes",
                    result.profiles, result.spans, result.used_bytes,
                )
        await asyncio.sleep(interval)


@contextlib.asynccontextmanager
async def standalone_backends(app: web.Application) -> AsyncIterator[Store]:
    from bridge.app import BACKENDS, CLOCK, METRICS, SETTINGS

    settings = app[SETTINGS]
    store = await Store.open(settings.data_dir, clock=app[CLOCK].now, metrics=app[METRICS])
    backends = app[BACKENDS]
    backends.traces = store
    backends.profiles = store
    backends.extras["store"] = store
    backends.extras["pyroscope_local"] = querier_api.rpc_table(store)
    backends.extras["tempo_local"] = tempo_api.make_handler(store)
    backends.extras["profile_sink"] = store
    backends.extras["trace_sink"] = store
    task = spawn(retention_loop(store, settings, retention_interval(settings)), "store-retention")
    log.info("standalone mode: store at %s", store.path)
    try:
        yield store
    finally:
        await cancel_all([task])
        await store.close()
