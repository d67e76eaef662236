"""The service names the profile backend holds, per tenant, kept for a while: what ``PROFILE_BRIDGE_ENRICH=
profiled-services`` enriches (a span of a service nobody profiles gets no "Profiles for this span" button).

Asked of the profile backend (Pyroscope's ``LabelValues`` of the service label over the last week, or the store) at
most once per ``ttl`` per tenant, one caller at a time; when it cannot answer, the last known set is used, or, with
none, every span is enriched (``None``). At most ``MAX_TENANTS`` tenants are remembered (least recently used first
out): the tenant is whatever the caller's header says, so the memory must not grow with it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Final

from cachetools import LRUCache

from bridge._proto import types_pb2 as tpb
from bridge.call import CallContext
from bridge.config import Settings
from bridge.enrich import EnrichPolicy, Policy
from bridge.errors import BridgeError
from bridge.sources import ProfileSource
from bridge.wire.pyroscope import SERVICE_LABEL

log = logging.getLogger("bridge.tempo")

LOOKBACK_MS: Final = 7 * 24 * 3600 * 1000
MAX_TENANTS: Final = 10_000


def service_label(settings: Settings) -> str:
    """The profile label that holds ``service.name`` (``PROFILE_BRIDGE_LABEL_MAP``; ``service_name`` by default)."""
    return dict(settings.label_map).get("service.name", SERVICE_LABEL)


class ProfiledServices:
    """The set per tenant, for ``ttl`` seconds (``monotonic`` measures that; ``wall_clock`` is "now" for the query)."""

    def __init__(
        self,
        profiles: ProfileSource,
        label: str,
        ttl: float,
        *,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        max_tenants: int = MAX_TENANTS,
    ) -> None:
        self.profiles = profiles
        self.label = label
        self.ttl = ttl
        self.wall_clock = wall_clock
        self.monotonic = monotonic
        self._entries: LRUCache[str, tuple[float, frozenset[str]]] = LRUCache(max_tenants)
        # a lock evicted while held only lets a second caller ask too: harmless
        self._locks: LRUCache[str, asyncio.Lock] = LRUCache(max_tenants)

    async def get(self, ctx: CallContext) -> frozenset[str] | None:
        """The set, or None when the backend could not say (and nothing was known before)."""
        key = ctx.cache_scope
        entry = self._entries.get(key)
        if entry is not None and self.monotonic() - entry[0] < self.ttl:
            return entry[1]
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        async with lock:
            entry = self._entries.get(key)
            if entry is not None and self.monotonic() - entry[0] < self.ttl:
                return entry[1]
            now_ms = int(self.wall_clock() * 1000)
            req = tpb.LabelValuesRequest(name=self.label, start=now_ms - LOOKBACK_MS, end=now_ms)
            try:
                answer = await self.profiles.label_values(req, ctx)
            except BridgeError as exc:
                log.warning(
                    "enrich=profiled-services: cannot ask %s for its services (%s); %s",
                    self.profiles.name,
                    exc.message,
                    "using the last known set" if entry else "enriching every span",
                )
                return entry[1] if entry else None
            names = frozenset(answer.names)
            self._entries[key] = (self.monotonic(), names)
            return names


async def enrich_policy(setting: str, services: ProfiledServices, ctx: CallContext) -> EnrichPolicy:
    """The enrichment policy for one trace answer: the setting, with the profiled services when it needs them."""
    policy = Policy(setting)
    if policy is not Policy.PROFILED_SERVICES:
        return EnrichPolicy(policy)
    names = await services.get(ctx)
    if names is None:
        return EnrichPolicy(Policy.ALL)
    return EnrichPolicy(Policy.PROFILED_SERVICES, names)
