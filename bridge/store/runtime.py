"""The store's background work while the app runs, on one task: first, for a store too large to check whole before
it opened, SQLite's quick_check over the whole file (``Database.check_whole``); then compaction of the rollups (every
``COMPACT_INTERVAL`` seconds), retention by age and by size (every minute, or more often when data expires sooner),
and the query planner's statistics (``ANALYZE``, every ``ANALYZE_INTERVAL`` seconds, first once compaction has caught
up at start). On a store found damaged every step is skipped (the damage was logged at ERROR once, with what to
do)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import Final, TypeVar

from bridge.config import Settings
from bridge.errors import StorageFull, StoreDamaged
from bridge.store.backend import Store

log = logging.getLogger("bridge.store")
T = TypeVar("T")

MAX_RETENTION_INTERVAL: Final = 60.0
COMPACT_INTERVAL: Final = 10.0
ANALYZE_INTERVAL: Final = 3600.0


def retention_interval(settings: Settings) -> float:
    """How often retention runs: every minute, or more often when data expires sooner."""
    return max(1.0, min(MAX_RETENTION_INTERVAL, settings.retention_age / 10))


async def maintenance_loop(store: Store, settings: Settings, interval: float) -> None:
    """Compaction, retention (every ``interval`` seconds) and ``ANALYZE``; a failed step is logged and retried on its
    next turn."""
    tick = min(interval, COMPACT_INTERVAL)
    if store.db.deferred_check:
        log.info("store: checking the whole file in the background (too large to check before it opened)")
        if await _step("check", store.db.check_whole()) == []:
            log.info("store: the whole file is intact (SQLite's quick_check)")
    next_retention = next_analyze = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= next_retention:
            next_retention = now + interval
            result = await _step("retention", store.enforce_retention(settings.retention_age, settings.retention_bytes))
            if result is not None and (result.profiles or result.spans):
                log.info(
                    "retention dropped %d profiles and %d spans; store uses %d bytes",
                    result.profiles,
                    result.spans,
                    result.used_bytes,
                )
        await _step("rollup compaction", store.compact())
        if time.monotonic() >= next_analyze:
            next_analyze = time.monotonic() + ANALYZE_INTERVAL
            await _step("ANALYZE", store.analyze())
        await asyncio.sleep(tick)


async def _step(name: str, work: Awaitable[T]) -> T | None:
    """One background step; None when it failed. A full disk is one episode, reported once by the disk-full watch
    (bridge/diskfull.py) at ERROR: a step that cannot write meanwhile only says so at INFO. Anything else is logged
    with its traceback. Either way the step runs again on its next turn."""
    try:
        return await work
    except StorageFull as exc:
        log.info("store %s postponed: %s", name, exc.message)
    except StoreDamaged:
        log.debug("store %s skipped: the store is damaged", name)
    except Exception:  # noqa: BLE001 - logged, retried on the next turn
        log.exception("store %s failed", name)
    return None
