"""The store's background work while the app runs, on one task: compaction of the rollups (every
``COMPACT_INTERVAL`` seconds), retention by age and by size (every minute, or more often when data expires sooner),
and the query planner's statistics (``ANALYZE``, every ``ANALYZE_INTERVAL`` seconds, first once compaction has caught
up at start)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

from bridge.config import Settings
from bridge.errors import StorageFull
from bridge.store.backend import Store

log = logging.getLogger("bridge.store")

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
    next_retention = next_analyze = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= next_retention:
            next_retention = now + interval
            try:
                result = await store.enforce_retention(settings.retention_age, settings.retention_bytes)
            except StorageFull as exc:
                _postponed("retention", exc)
            except Exception:  # noqa: BLE001 - logged, retried on the next turn
                log.exception("store retention pass failed")
            else:
                if result.profiles or result.spans:
                    log.info(
                        "retention dropped %d profiles and %d spans; store uses %d bytes",
                        result.profiles, result.spans, result.used_bytes,
                    )
        try:
            await store.compact()
        except StorageFull as exc:
            _postponed("rollup compaction", exc)
        except Exception:  # noqa: BLE001 - logged, retried on the next turn
            log.exception("store rollup compaction failed")
        if time.monotonic() >= next_analyze:
            next_analyze = time.monotonic() + ANALYZE_INTERVAL
            try:
                await store.analyze()
            except StorageFull as exc:
                _postponed("ANALYZE", exc)
            except Exception:  # noqa: BLE001 - logged, retried on the next turn
                log.exception("store ANALYZE failed")
        await asyncio.sleep(tick)


def _postponed(step: str, exc: StorageFull) -> None:
    """A full disk is one episode, reported once by the disk-full watch (bridge/diskfull.py) at ERROR; background
    steps that cannot write meanwhile only say so at INFO and run again on their next turn."""
    log.info("store %s postponed: %s", step, exc.message)
