"""The store's background work while the app runs: retention by age and by size, on a steady tick."""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from bridge.config import Settings
from bridge.store.backend import Store

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
